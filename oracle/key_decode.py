"""The reference's key decode on CUDA in one pass: gathered records -> f64 keys [N, 576].

launch writes keys[n] = [code * scale (512), rope (64)] of KV row slots[n] (+0 everywhere where
slots[n] < 0, a masked slot) straight from the cache: one Triton kernel that reads each record
once and writes each key once, instead of torch's gather, e4m3 -> f16 conversion, mixed f16 x f64
product and rope copy (each a pass over [N, *]-sized tensors; on an H200 the torch decode is 2/3
of the reference's time at n_q 4096).

Same bits as oracle.rows' torch decode by construction: the two f64 operands of every latent
product are the torch path's own (the code through torch's e4m3 -> f16 -> f64 casts, as a
256-entry table built on the device; the f32 scale widened, exact), and the product
of two f64 values is IEEE (exact here: 4 x 24 significant bits), a NaN code keeping its own
payload as in torch's product; rope is a bf16 widened (exact).
On top of that the kernel is the fast path `oracle.key-decode` (kernel.fastpath, registered by
oracle.rows, which holds the torch decode): used on a device only after it reproduced the torch
decode's bits on kernel.fastpath.check_records (`self_check`: every code under scales of every
class, every bf16 rope pattern, masked slots); otherwise, or without Triton, or with
CONFORMANCE_FAST_PATHS=oracle.key-decode=off, callers use the torch path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernel import fastpath
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET

BLOCK_KEYS = 8  # keys per program (an H200, 2^21 keys: 8 keys / 4 warps 3.71 ms, 16 / 4 3.91, 16 / 8 3.76, 32 / 4 4.97)
NUM_WARPS = 4
FAST_PATH = "oracle.key-decode"
# how the kernel turns a code into its f64 value: "arith" (exponent and mantissa fields; NaN codes
# read from the table) or "table" (a load from the 256-entry table per code); same bits
VARIANTS = ("table", "arith")  # in the order the fast path tries them (table: 3.5 TB/s on an H200, arith 2.9)


_CODE_TABLES: dict[torch.device, torch.Tensor] = {}


def code_table(device: torch.device) -> torch.Tensor:
    """f64 [256]: each e4m3 code as the torch decode widens it (float8_e4m3fn -> f16 -> f64, the
    casts torch applies on `device`; exact for every finite code). Cached per device."""
    table = _CODE_TABLES.get(device)
    if table is None:
        codes = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
        table = codes.view(torch.float8_e4m3fn).to(torch.float16).to(torch.float64)
        _CODE_TABLES[device] = table
    return table


@functools.cache
def _kernel(interpret: bool) -> Callable[..., object]:
    """The Triton kernel (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n_keys"])  # one compile for every key count
    def decode(cache_ptr, scale_ptr, rope_ptr, slots_ptr, table_ptr, keys_ptr, n_keys, BLOCK: tl.constexpr, ARITH: tl.constexpr):  # type: ignore[no-untyped-def]
        key = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        live = key < n_keys
        slot = tl.load(slots_ptr + key, mask=live, other=-1)
        valid = slot >= 0
        record = tl.where(valid, slot, 0) * 656  # byte offset of the record
        out = keys_ptr + key * 576
        cols = tl.arange(0, 128)
        for g in tl.static_range(4):
            code = tl.load(cache_ptr + record[:, None] + (g * 128 + cols)[None, :], mask=valid[:, None], other=0).to(tl.int32)
            if ARITH:
                # the exact magnitude (8 + m) 2^(e - 10), or m 2^-9 for e = 0, then the sign bit set
                # (not a negation: Triton negates as 0 - x, which turns -0 into +0); NaN codes are
                # read from the table
                e = (code >> 3) & 15
                m = code & 7
                mant = tl.where(e == 0, m, m + 8).to(tl.float64)
                step = ((tl.maximum(e, 1) + (1023 - 10)).to(tl.int64) << 52).to(tl.float64, bitcast=True)
                sign = ((code >> 7) & 1).to(tl.int64) << 63
                value = ((mant * step).to(tl.int64, bitcast=True) | sign).to(tl.float64, bitcast=True)
                nan_code = (code & 0x7F) == 0x7F
                value = tl.where(nan_code, tl.load(table_ptr + code, mask=nan_code, other=0.0), value)
            else:
                value = tl.load(table_ptr + code)
            # the f32 scale widened as torch's f32 -> f64 cast does (exact, subnormals kept)
            scale = tl.load(scale_ptr + (record // 4 + 128 + g), mask=valid, other=0.0).to(tl.float64)
            # a NaN code keeps its own payload, as in torch's product (code x scale) also when the
            # scale is NaN too: which NaN a product of two returns depends on the operand order,
            # which the compiler may swap
            nan_value = (value.to(tl.int64, bitcast=True) & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000
            prod = tl.where(nan_value, value, value * scale[:, None])
            prod = tl.where(valid[:, None], prod, 0.0)
            tl.store(out[:, None] + (g * 128 + cols)[None, :], prod, mask=live[:, None])
        rcols = tl.arange(0, 64)
        half = tl.load(rope_ptr + (record // 2 + 264)[:, None] + rcols[None, :], mask=valid[:, None], other=0)
        bits = (half.to(tl.int32) & 0xFFFF) << 16  # bf16 = the top half of an f32
        rope = bits.to(tl.float32, bitcast=True).to(tl.float64)
        tl.store(out[:, None] + (512 + rcols)[None, :], tl.where(valid[:, None], rope, 0.0), mask=live[:, None])

    return decode


@dataclass(frozen=True)
class Decoder:
    """What launch needs: the device's code table (code_table) and the kernel variant (VARIANTS)."""

    table: torch.Tensor
    variant: str = "arith"


def launch(flat: torch.Tensor, slots: torch.Tensor, keys: torch.Tensor, decoder: Decoder) -> None:
    """keys f64 [N, 576] (contiguous) := the decoded records flat[slots] (uint8 [rows, 656],
    contiguous; slots int64 [N], -1 at masked slots: +0 keys). No host read."""
    n_keys = slots.numel()
    if n_keys == 0:
        return
    grid = ((n_keys + BLOCK_KEYS - 1) // BLOCK_KEYS,)
    arith = decoder.variant == "arith"
    words, halves = flat.view(torch.float32), flat.view(torch.int16)  # the same bytes as f32 scales, bf16 rope
    _kernel(fastpath.interpreting())[grid](
        flat, words, halves, slots, decoder.table, keys, n_keys, BLOCK=BLOCK_KEYS, ARITH=arith, num_warps=NUM_WARPS
    )


def usable(flat: torch.Tensor) -> bool:
    """Whether launch can decode from this flat cache (layout only; the device: the fast path FAST_PATH)."""
    return flat.is_contiguous() and flat.data_ptr() % 16 == 0 and flat.dim() == 2 and flat.shape[1] == RECORD_BYTES


def self_check(device: torch.device, reference: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], variant: str) -> bool:
    """Whether launch with `variant` reproduces `reference(flat, slots)` (the torch decode: keys
    [N, 576]) bit for bit on kernel.fastpath.check_records."""
    flat, slots = fastpath.check_records(device)
    want = reference(flat, slots)
    got = torch.empty(slots.numel(), HEAD_DIM, dtype=torch.float64, device=device)
    launch(flat, slots, got, Decoder(code_table(device), variant))
    return bool(torch.equal(got.view(torch.int64), want.view(torch.int64)))


def eligible(device: torch.device, variant: str) -> str:
    """Where the kernel may run (kernel.fastpath.FastPath.eligible): a CUDA device, Triton importable."""
    if device.type != "cuda":
        return "needs a CUDA device"
    return "" if fastpath.have_triton() else "Triton is not installed"


assert LATENT_DIM == 512 and RECORD_BYTES == 656 and SCALE_OFFSET == 512 and ROPE_OFFSET == 528  # the kernel's constants
