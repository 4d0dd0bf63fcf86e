"""The emulated kernel's K and V operands of one group of tiles: e4m3 codes of the gathered
records widened to f64 in the MFMAs' order.

    keys(records, rows, n_keys)  f64 [rows, 16 (b, j), n_keys, 32]: key n's dims 128b + 32j .. + 31
    values(records, masked)      f64 [R * 16 (kk, b), 32, 128]: MFMA kk = 2 hf + sub's 32 keys
                                 (key = 64 hf + 32 a + 16 b' + 8 c + 4 sub + t, in (a, b', c, t)
                                 order), dims 128 b .. + 127; 0 for masked keys

records: uint8 [R, 128, 656] (R = rows * tiles, row-major), masked: bool [R, 128]. The torch
path (`keys_torch`, `values_torch`: one casting copy each through torch's float8_e4m3fn view)
needs the masked keys' record bytes zeroed beforehand; on CUDA one Triton kernel each
(`keys_triton`, `values_triton`: the code's value read from the 256-entry f64 e4m3 table, masked
keys written as +0), coalesced on both sides: the fast path `emulated.decode` (kernel.fastpath;
off with CONFORMANCE_FAST_PATHS=emulated.decode=off or emulated.state=off), used only after it
reproduced the torch path's values on a probe (every code, masked keys; NaN compared as NaN: the
emulator models no payload).
On one H200 (2026-12-02, 16 heads, 2048 keys per row) a call takes 98.7 ms at n_q 4096 with
these kernels and 124.9 ms without, 26.8 and 33.2 ms at n_q 1024, 4.43 and 4.13 ms at n_q 64,
with the same bits as the torch path (`python -m benchmarks fast_paths` measures it).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from kernel import fastpath
from kernel.emulated.state import FAST_PATH as STATE_PATH
from kernel.emulated.state import _on, eligible
from kernel.fp8 import e4m3_table

FAST_PATH = "emulated.decode"
RECORD = 656
LATENT = 512


def keys_torch(records: torch.Tensor, rows: int, n_keys: int) -> torch.Tensor:
    """keys() by a casting copy (masked keys: whatever their bytes decode to)."""
    codes = records.view(rows, n_keys, RECORD)[..., :LATENT].view(rows, n_keys, 16, 32).transpose(1, 2)
    values = torch.empty(codes.shape, dtype=torch.float64, device=records.device)
    values.copy_(codes.view(torch.float8_e4m3fn))
    return values


def values_torch(records: torch.Tensor) -> torch.Tensor:
    """values() by a casting copy, for records whose masked keys' bytes are zeroed."""
    r = records.shape[0]
    codes = records[..., :LATENT].view(r, 2, 2, 2, 2, 2, 4, 4, 128).permute(0, 1, 5, 7, 2, 3, 4, 6, 8)
    values = torch.empty(codes.shape, dtype=torch.float64, device=records.device)
    values.copy_(codes.view(torch.float8_e4m3fn))
    return values.view(r * 16, 32, 128)


@functools.cache
def _kernels(interpret: bool) -> tuple[Callable[..., object], Callable[..., object]]:
    """The two Triton kernels (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit
    def keys(rec_ptr, table_ptr, out_ptr, n_keys):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)  # row * 16 + (b, j)
        block = tl.program_id(1)  # 64 keys
        row = pid // 16
        bj = pid % 16
        n = block * 64 + tl.arange(0, 64)[:, None]
        i = tl.arange(0, 32)[None, :]
        src = rec_ptr + (row.to(tl.int64) * n_keys + n) * 656 + bj * 32 + i
        value = tl.load(table_ptr + tl.load(src).to(tl.int32))
        tl.store(out_ptr + (pid.to(tl.int64) * n_keys + n) * 32 + i, value)

    @triton.jit
    def values(rec_ptr, masked_ptr, table_ptr, out_ptr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)  # rt * 16 + kk * 4 + b
        rt = pid // 16
        kk = (pid // 4) % 4
        b = pid % 4
        j = tl.arange(0, 32)[:, None]  # (a, b', c, t)
        key = (kk // 2) * 64 + (j // 16) * 32 + ((j // 8) % 2) * 16 + ((j // 4) % 2) * 8 + (kk % 2) * 4 + j % 4
        d = tl.arange(0, 128)[None, :]
        slot = rt.to(tl.int64) * 128 + key
        code = tl.load(rec_ptr + slot * 656 + b * 128 + d).to(tl.int32)
        value = tl.load(table_ptr + code)
        value = tl.where(tl.load(masked_ptr + slot) != 0, 0.0, value)
        tl.store(out_ptr + (pid.to(tl.int64) * 32 + j) * 128 + d, value)

    return keys, values


def keys_triton(records: torch.Tensor, rows: int, n_keys: int) -> torch.Tensor:
    """keys() by the Triton kernel."""
    out = torch.empty(rows, 16, n_keys, 32, dtype=torch.float64, device=records.device)
    table = e4m3_table(records.device, torch.float64)
    with _on(records.device):
        _kernels(fastpath.interpreting())[0][(rows * 16, n_keys // 64)](records, table, out, n_keys)  # type: ignore[index]
    return out


def values_triton(records: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """values() by the Triton kernel (masked keys written as 0 whatever their bytes)."""
    r = records.shape[0]
    out = torch.empty(r * 16, 32, 128, dtype=torch.float64, device=records.device)
    table = e4m3_table(records.device, torch.float64)
    with _on(records.device):
        _kernels(fastpath.interpreting())[1][(r * 16,)](records, masked.view(torch.uint8), table, out)  # type: ignore[index]
    return out


def self_check(device: torch.device) -> bool:
    """Whether the kernels give the torch path's values on a probe group on `device`: 2 rows
    of 2 tiles, every code at every byte position, a third of the keys masked."""
    g = torch.Generator().manual_seed(29)
    rows, tiles = 2, 2
    r = rows * tiles
    records = torch.randint(0, 256, (r, 128, RECORD), generator=g, dtype=torch.uint8)
    records[0, :, :LATENT] = torch.arange(128 * LATENT, dtype=torch.int64).remainder(256).to(torch.uint8).view(128, LATENT)
    masked = torch.rand(r, 128, generator=g) < 0.33
    records, masked = records.to(device), masked.to(device)
    if not fastpath.same_bits(keys_triton(records, rows, tiles * 128), keys_torch(records, rows, tiles * 128)):
        return False
    zeroed = records.clone()
    zeroed[masked] = 0
    return fastpath.same_bits(values_triton(records, masked), values_torch(zeroed))


fastpath.register(fastpath.FastPath(FAST_PATH, ("triton",), lambda device, variant: self_check(device), eligible, needs=(STATE_PATH,)))


def keys(records: torch.Tensor, rows: int, n_keys: int, kernel: bool) -> torch.Tensor:
    """keys(): the kernel when `kernel` (the fast path FAST_PATH chosen), else (or if it raises) torch."""
    if kernel:
        try:
            return keys_triton(records, rows, n_keys)
        except Exception as err:  # noqa: BLE001 - raised before the launch: torch
            warnings.warn(f"emulated: Triton K decode failed ({type(err).__name__}: {err}); using torch", stacklevel=2)
    return keys_torch(records, rows, n_keys)


def values(records: torch.Tensor, masked: torch.Tensor, kernel: bool) -> torch.Tensor:
    """values(): the kernel when `kernel`, else torch on records whose masked keys' bytes the
    caller zeroed (if the kernel raises, they are zeroed here first)."""
    if kernel:
        try:
            return values_triton(records, masked)
        except Exception as err:  # noqa: BLE001 - raised before the launch: torch
            warnings.warn(f"emulated: Triton V decode failed ({type(err).__name__}: {err}); using torch", stacklevel=2)
            records.masked_fill_(masked.unsqueeze(-1), 0)
    return values_torch(records)
