"""kernel.host_copy: the same tensor torch's own calls give, and on CUDA no host sync to get it."""

from __future__ import annotations

import pytest
import torch

from kernel.host_copy import move_to, to_device

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([3, -1, 2**40], torch.int64),
        (0.1 * 1.4426950408889634, torch.float32),
        ([0.1, -0.0, float("inf")], torch.float64),
        ([], torch.int64),
    ],
)
def test_to_device_is_torch_tensor_on_the_cpu(values: object, dtype: torch.dtype) -> None:
    got = to_device(values, dtype=dtype, device=torch.device("cpu"))  # type: ignore[arg-type]
    want = torch.tensor(values, dtype=dtype)
    assert got.dtype == want.dtype and got.shape == want.shape and got.device.type == "cpu"
    assert torch.equal(got.view(-1).view(torch.uint8), want.view(-1).view(torch.uint8))


def test_move_to_the_cpu_is_tensor_to() -> None:
    t = torch.arange(5)
    assert move_to(t, torch.device("cpu")) is t.to("cpu")


@CUDA
def test_on_cuda_the_same_bits_without_a_host_sync() -> None:
    device = torch.device("cuda")
    host = torch.tensor([1.0e-40, -0.0, 3.0e38, float("nan")], dtype=torch.float32)
    torch.cuda.set_sync_debug_mode("error")  # a synchronising copy raises
    try:
        scalar = to_device(0.1 * 1.4426950408889634, dtype=torch.float32, device=device)
        listed = to_device([3, -1, 2**40], dtype=torch.int64, device=device)
        moved = move_to(host, device)
        host.fill_(7.0)  # the caller's tensor changes at once: the queued copy reads its own pinned buffer
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert scalar.device.type == "cuda" and moved.device.type == "cuda"
    assert torch.equal(scalar.cpu().view(torch.int32), torch.tensor(0.1 * 1.4426950408889634, dtype=torch.float32).view(torch.int32))
    assert listed.cpu().tolist() == [3, -1, 2**40]
    want = torch.tensor([1.0e-40, -0.0, 3.0e38, float("nan")], dtype=torch.float32)
    assert torch.equal(moved.cpu().view(torch.int32), want.view(torch.int32))
