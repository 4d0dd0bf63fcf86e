"""Host side of the FlyDSL gfx950 backend, without a GPU: availability and refusals, argument
handling (strides, staging, out / lse allocation, n_q == 0), launch arguments and launcher
keying. The launcher is replaced by a recording fake; nothing here needs flydsl."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from kernel.backend import Backend, BackendUnavailable, gfx950_available
from kernel.contract import CallInfo, ContractError
from kernel.flydsl import host as fh
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES


def make_call(n_q: int = 3, heads: int = 4, rows: int = 10, n_idx: int = 20, q: torch.Tensor | None = None):
    g = torch.Generator().manual_seed(1)
    if q is None:
        q = torch.randn(n_q, heads, HEAD_DIM, generator=g).to(torch.bfloat16)
    kv = torch.zeros(rows, RECORD_BYTES, dtype=torch.uint8)
    indices = torch.randint(0, rows, (n_idx,), generator=g, dtype=torch.int32)
    indptr = torch.linspace(0, n_idx, n_q + 1).round().to(torch.int32)
    return q, kv, indices, indptr


class FakeLauncher:
    """Records launches."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))


@pytest.fixture(autouse=True)
def _fresh_launchers():
    fh.clear_launchers()
    yield
    fh.clear_launchers()


# ---------------------------------------------------------------- availability


def test_backend_unavailable_here_names_gfx950():
    if gfx950_available():
        pytest.skip("this machine has a gfx950 device")
    with pytest.raises(BackendUnavailable) as err:
        fh.flydsl_backend()
    assert "gfx950" in str(err.value)


def test_backend_fields_when_available(monkeypatch):
    monkeypatch.setattr(fh, "unavailable_reasons", list)
    b = fh.flydsl_backend()
    assert isinstance(b, Backend)
    assert (b.name, b.profile, b.devices, b.max_heads) == ("flydsl", "gfx950", ("cuda",), 16)
    assert b.accepts_out is True and b.bounded_index_reads is False
    assert b.fn is fh.flydsl_sparse_mla
    assert any("power of two" in line for line in b.limits)
    assert any("2^7" in line for line in b.limits)


def test_reason_when_flydsl_missing(monkeypatch):
    monkeypatch.setattr(fh, "gfx950_available", lambda: True)
    monkeypatch.setitem(sys.modules, "flydsl", None)  # import flydsl -> ImportError
    reasons = fh.unavailable_reasons()
    assert len(reasons) == 1 and "flydsl is not importable" in reasons[0] and "pip install" in reasons[0]
    with pytest.raises(BackendUnavailable, match="flydsl is not importable"):
        fh.flydsl_backend()


def test_reason_when_flydsl_version_wrong(monkeypatch):
    class Fake:
        __version__ = "0.5.0"

    monkeypatch.setattr(fh, "gfx950_available", lambda: True)
    monkeypatch.setitem(sys.modules, "flydsl", Fake())
    assert fh.unavailable_reasons() == ["flydsl 0.5.0 is installed; the kernel is written for flydsl 0.4.x"]


def test_both_reasons_reported(monkeypatch):
    monkeypatch.setattr(fh, "gfx950_available", lambda: False)
    monkeypatch.setitem(sys.modules, "flydsl", None)
    reasons = fh.unavailable_reasons()
    assert len(reasons) == 2 and "gfx950" in reasons[0] and "flydsl" in reasons[1]


def test_support_predicate_refuses_cpu(monkeypatch):
    monkeypatch.setattr(fh, "unavailable_reasons", list)
    b = fh.flydsl_backend()
    q, kv, idx, iptr = make_call()
    s = b.supports(q, kv, idx, iptr, 0.1)
    assert not s and "cuda" in s.reason
    info = CallInfo(
        n_q=1, heads=1, n_indices=0, kv_rows=1, device=torch.device("cpu"), has_invalid=False, return_lse=False, out_given=False
    )
    assert "gfx950" in fh._extra_support(info)
    # 17 heads is refused by the contract check with max_heads=16
    q17, kv, idx, iptr = make_call(heads=17)
    s = b.supports(q17, kv, idx, iptr, 0.1)
    assert not s and "H=17" in s.reason


def test_device_check_on_cpu():
    assert fh.device_is_gfx950(torch.device("cpu")) is False


# ---------------------------------------------------------------- plans and launches


def test_plan_contiguous_arguments():
    q, kv, idx, iptr = make_call(n_q=3, heads=4)
    zero = torch.zeros(RECORD_BYTES, dtype=torch.uint8)
    plan = fh.plan_call(q, kv, idx, iptr, 0.125, has_invalid=True, return_lse=True, zero=lambda d: zero)
    assert plan.key == (4, True, True)
    assert not plan.q_staged and not plan.copy_back
    assert plan.q_run is q and plan.out_run is plan.out
    assert plan.out.shape == (3, 4, LATENT_DIM) and plan.out.dtype == torch.bfloat16
    assert plan.lse is not None and plan.lse.shape == (3, 4) and plan.lse.dtype == torch.float32
    (q_a, kv_a, idx_a, iptr_a, out_a, lse_a, zero_a, n_q, sq, sqh, so, soh, idx_bytes, c_log2) = plan.args
    assert (q_a, kv_a, idx_a, iptr_a) == (q.data_ptr(), kv.data_ptr(), idx.data_ptr(), iptr.data_ptr())
    assert (out_a, lse_a, zero_a) == (plan.out.data_ptr(), plan.lse.data_ptr(), zero.data_ptr())
    assert (n_q, sq, sqh, so, soh) == (3, 4 * HEAD_DIM, HEAD_DIM, 4 * LATENT_DIM, LATENT_DIM)
    assert idx_bytes == 4 * idx.numel()
    assert c_log2 == pytest.approx(0.125 * math.log2(math.e), rel=1e-15)


def test_plan_without_lse_passes_null():
    q, kv, idx, iptr = make_call()
    plan = fh.plan_call(q, kv, idx, iptr, 1.0)
    assert plan.lse is None and plan.args[5] == 0 and plan.key[2] is False


def test_strided_q_passes_strides_without_copy():
    big = torch.randn(3, 4, 600).to(torch.bfloat16)  # head stride 600 (multiple of 8)
    q = big[:, :, :HEAD_DIM]
    _, kv, idx, iptr = make_call(q=q)
    plan = fh.plan_call(q, kv, idx, iptr, 1.0)
    assert not plan.q_staged and plan.q_run is q
    assert plan.args[8:10] == (4 * 600, 600)


def test_head_major_q_view():
    base = torch.randn(4, 3, HEAD_DIM).to(torch.bfloat16)
    q = base.transpose(0, 1)  # row stride 576, head stride 3 * 576
    _, kv, idx, iptr = make_call(q=q)
    plan = fh.plan_call(q, kv, idx, iptr, 1.0)
    assert not plan.q_staged and plan.args[8:10] == (HEAD_DIM, 3 * HEAD_DIM)


def test_misaligned_q_is_staged():
    big = torch.randn(3, 4, 577).to(torch.bfloat16)  # head stride 577: not a multiple of 8
    q = big[:, :, 1:]
    _, kv, idx, iptr = make_call(q=q)
    plan = fh.plan_call(q, kv, idx, iptr, 1.0)
    assert plan.q_staged and plan.q_run is not q
    assert plan.q_run.is_contiguous() and torch.equal(plan.q_run, q)
    assert plan.args[0] == plan.q_run.data_ptr() and plan.args[8:10] == (4 * HEAD_DIM, HEAD_DIM)


def test_size_one_dims_ignore_strides():
    big = torch.randn(1, 1, 700).to(torch.bfloat16)
    q = big[:, :, :HEAD_DIM]
    q = q.as_strided((1, 1, HEAD_DIM), (12345, 777, 1))  # odd strides on size-1 dims
    _, kv, idx, iptr = make_call(n_q=1, heads=1, q=q)
    plan = fh.plan_call(q, kv, idx, iptr, 1.0)
    assert not plan.q_staged and plan.args[8:10] == (0, 0)


def test_given_out_is_written_in_place_with_its_strides():
    q, kv, idx, iptr = make_call(n_q=3, heads=4)
    store = torch.zeros(3, 4, 520, dtype=torch.bfloat16)  # head stride 520 (multiple of 4)
    out = store[:, :, :LATENT_DIM]
    plan = fh.plan_call(q, kv, idx, iptr, 1.0, out=out)
    assert plan.out is out and plan.out_run is out and not plan.copy_back
    assert plan.args[4] == out.data_ptr() and plan.args[10:12] == (4 * 520, 520)
    fake = FakeLauncher()
    res, lse = fh.run_plan(plan, launcher_for=lambda *k: fake, stream_for=lambda d: None)
    assert res is out and lse is None and len(fake.calls) == 1


def test_misaligned_out_is_staged_and_copied_back():
    q, kv, idx, iptr = make_call(n_q=3, heads=4)
    store = torch.zeros(3, 4, 515, dtype=torch.bfloat16)
    out = store[:, :, 3:]  # head stride 515, base offset 6 bytes
    plan = fh.plan_call(q, kv, idx, iptr, 1.0, out=out)
    assert plan.copy_back and plan.out_run is not out and plan.out_run.is_contiguous()
    assert plan.args[4] == plan.out_run.data_ptr() and plan.args[10:12] == (4 * LATENT_DIM, LATENT_DIM)
    expected = torch.arange(3 * 4 * LATENT_DIM, dtype=torch.float32).reshape(3, 4, LATENT_DIM).to(torch.bfloat16)

    def launcher(*args, **kwargs):
        plan.out_run.copy_(expected)  # what the kernel writes

    res, _ = fh.run_plan(plan, launcher_for=lambda *k: launcher, stream_for=lambda d: None)
    assert res is out and torch.equal(out, expected)
    assert torch.equal(store[:, :, :3], torch.zeros(3, 4, 3, dtype=torch.bfloat16))  # untouched


def test_zero_rows_launch_nothing():
    q = torch.zeros(0, 5, HEAD_DIM, dtype=torch.bfloat16)
    kv = torch.zeros(4, RECORD_BYTES, dtype=torch.uint8)
    idx = torch.zeros(0, dtype=torch.int32)
    iptr = torch.zeros(1, dtype=torch.int32)

    def boom(*key):
        raise AssertionError("no launcher may be built for n_q == 0")

    plan = fh.plan_call(q, kv, idx, iptr, 1.0, return_lse=True)
    out, lse = fh.run_plan(plan, launcher_for=boom)
    assert out.shape == (0, 5, LATENT_DIM) and lse is not None and lse.shape == (0, 5)
    # the public wrapper needs no device for an empty call either
    out2, lse2 = fh.flydsl_sparse_mla(q, kv, idx, iptr, 1.0)
    assert out2.shape == (0, 5, LATENT_DIM) and lse2 is None


def test_public_wrapper_refuses_non_gfx950_device():
    q, kv, idx, iptr = make_call()
    with pytest.raises(ValueError, match="gfx950"):
        fh.flydsl_sparse_mla(q, kv, idx, iptr, 1.0)


def test_contract_errors_come_first():
    q, kv, idx, iptr = make_call()
    with pytest.raises(ContractError, match="bfloat16"):
        fh.plan_call(q.float(), kv, idx, iptr, 1.0)
    with pytest.raises(ContractError, match="indptr"):
        fh.plan_call(q, kv, idx, iptr[:-1], 1.0)
    with pytest.raises(ContractError, match="softmax_scale"):
        fh.plan_call(q, kv, idx, iptr, float("nan"))


def test_misaligned_kv_cache_is_refused():
    q, _, idx, iptr = make_call(rows=10)
    flat = torch.zeros(10 * RECORD_BYTES + 16, dtype=torch.uint8)
    kv = flat[1 : 1 + 10 * RECORD_BYTES].view(10, RECORD_BYTES)
    assert kv.is_contiguous() and kv.data_ptr() % 16 != 0
    with pytest.raises(ValueError, match="16-byte"):
        fh.plan_call(q, kv, idx, iptr, 1.0)


def test_empty_index_stream_is_fine():
    q, kv, _, _ = make_call(n_q=2)
    idx = torch.zeros(0, dtype=torch.int32)
    iptr = torch.zeros(3, dtype=torch.int32)
    plan = fh.plan_call(q, kv, idx, iptr, 1.0, has_invalid=True)
    assert plan.args[12] == 0 and plan.n_q == 2


def test_launcher_cache_is_keyed_by_heads_invalid_lse():
    built: list[tuple] = []

    def builder(h, hi, rl):
        built.append((h, hi, rl))
        return FakeLauncher()

    a = fh.get_launcher(4, False, True, builder=builder)
    b = fh.get_launcher(4, False, True, builder=builder)
    c = fh.get_launcher(4, True, True, builder=builder)
    d = fh.get_launcher(5, False, True, builder=builder)
    e = fh.get_launcher(4, False, False, builder=builder)
    assert a is b and len({id(x) for x in (a, c, d, e)}) == 4
    assert built == [(4, False, True), (4, True, True), (5, False, True), (4, False, False)]
    assert fh.cached_launcher_keys() == sorted(built)


def test_run_plan_uses_the_plans_key_and_stream():
    q, kv, idx, iptr = make_call(n_q=2, heads=7)
    plan = fh.plan_call(q, kv, idx, iptr, 0.5, has_invalid=True)
    seen = {}
    fake = FakeLauncher()

    def launcher_for(*key):
        seen["key"] = key
        return fake

    fh.run_plan(plan, launcher_for=launcher_for, stream_for=lambda d: "the-stream")
    assert seen["key"] == (7, True, False)
    args, kwargs = fake.calls[0]
    assert args == plan.args and kwargs == {"stream": "the-stream"}


def test_zero_record_is_656_zero_bytes_cached():
    a = fh.zero_record(torch.device("cpu"))
    b = fh.zero_record(torch.device("cpu"))
    assert a is b and a.shape == (RECORD_BYTES,) and a.dtype == torch.uint8 and int(a.sum()) == 0
