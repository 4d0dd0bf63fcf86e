"""The bf16-KV adapters' key gather on CUDA in one pass: records -> bf16 keys [N, 576].

launch writes keys[n] = dequantise_bf16(flat[slots[n]]) (kernel.peers.keys: [bf16(bf16(code)
* bf16(scale)) (512), rope (64)]), +0 everywhere where slots[n] < 0 (a masked slot), in one Triton
kernel that reads each record once (656 bytes) and writes each key once (1152 bytes). The torch
paths move more: a gather from the whole cache kept dequantised (kernel.peers.dequant_cache)
reads and writes 1152 bytes per slot, and the per-slot gather of records then dequantises them
in four more passes.

The arithmetic is the torch path's, step by step as torch rounds on CUDA: the code widened to f32
(exact: bf16(code) = code), the f32 scale rounded to bf16 (to nearest, ties to even, by integer
steps; a NaN by the device's conversion), their f32 product rounded to bf16 the same way; rope
copied as bits. The kernel is the fast path `peers.bf16-keys`
(kernel.fastpath): used on a device only after it reproduced the torch path's bits on
kernel.fastpath.check_records (every code under scales of every class, every rope pattern, masked
slots), NaN payloads included (`self_check`); otherwise, without Triton, or with
CONFORMANCE_FAST_PATHS=peers.bf16-keys=off, callers keep the torch path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from kernel import fastpath
from kernel.peers.keys import dequantise_bf16
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET, index_records, record_words

BLOCK_KEYS = 8  # keys per program
NUM_WARPS = 4
# how the kernel widens a code to f32: "cvt" (Triton's float8e4nv -> f32 conversion) or "arith"
# (the exact value from the exponent and mantissa fields, the sign bit set, NaN for 0x7F / 0xFF)
VARIANTS = ("cvt", "arith")  # in the order the fast path tries them


@functools.cache
def _kernel(interpret: bool) -> Callable[..., object]:
    """The Triton kernel (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n_keys"])  # one compile for every key count
    def decode(cache_ptr, scale_ptr, rope_ptr, slots_ptr, keys_ptr, n_keys, BLOCK: tl.constexpr, ARITH: tl.constexpr):  # type: ignore[no-untyped-def]
        key = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        live = key < n_keys
        slot = tl.load(slots_ptr + key, mask=live, other=-1)
        valid = slot >= 0
        record = tl.where(valid, slot, 0) * 656  # byte offset of the record
        out = keys_ptr + key * 576  # keys as int16 bit patterns
        cols = tl.arange(0, 128)
        for g in tl.static_range(4):
            code = tl.load(cache_ptr + record[:, None] + (g * 128 + cols)[None, :], mask=valid[:, None], other=0)
            if ARITH:
                c = code.to(tl.int32)
                e = (c >> 3) & 15
                m = c & 7
                mant = tl.where(e == 0, m, m + 8).to(tl.float32)
                step = ((tl.maximum(e, 1) + (127 - 10)) << 23).to(tl.float32, bitcast=True)  # 2^(max(e, 1) - 10)
                magnitude = (mant * step).to(tl.int32, bitcast=True)
                value = (magnitude | ((c >> 7) << 31)).to(tl.float32, bitcast=True)
                value = tl.where((c & 0x7F) == 0x7F, float("nan"), value)
            else:
                value = code.to(tl.float8e4nv, bitcast=True).to(tl.float32)
            # f32 -> bf16 (nearest, ties to even) by integer steps, twice (kernel.fp8.round_f32_to_bf16's
            # bias trick): Triton's CPU interpreter converts by truncation, the integer steps round as the device does
            scale32 = tl.load(scale_ptr + (record // 4 + 128 + g), mask=valid, other=0.0)
            sbits = scale32.to(tl.int32, bitcast=True)
            sbits = (sbits + (0x7FFF + ((sbits >> 16) & 1))) & -65536  # bf16(scale) as the top half of an f32
            # a NaN scale stays the f32 NaN: the product is NaN either way
            scale = tl.where(scale32 != scale32, scale32, sbits.to(tl.float32, bitcast=True))
            prod = tl.where(valid[:, None], value * scale[:, None], 0.0)
            pbits = prod.to(tl.int32, bitcast=True)
            pbits = (pbits + (0x7FFF + ((pbits >> 16) & 1))) >> 16
            # a NaN product through the device's own conversion (its NaN bits are the torch path's there)
            nan_bits = prod.to(tl.bfloat16).to(tl.int16, bitcast=True)
            tl.store(out[:, None] + (g * 128 + cols)[None, :], tl.where(prod != prod, nan_bits, pbits.to(tl.int16)), mask=live[:, None])
        rcols = tl.arange(0, 64)
        rope = tl.load(rope_ptr + (record // 2 + 264)[:, None] + rcols[None, :], mask=valid[:, None], other=0)
        tl.store(out[:, None] + (512 + rcols)[None, :], rope, mask=live[:, None])

    return decode


def launch(flat: torch.Tensor, slots: torch.Tensor, keys: torch.Tensor, variant: str) -> None:
    """keys bf16 [N, 576] (contiguous) := dequantise_bf16 of the records flat[slots] (uint8
    [rows, 656], usable(flat); slots int64 [N], -1 at masked slots: +0 keys); `variant` one of
    VARIANTS. No host read; a slot >= rows reads out of bounds (the caller's bounded_index_reads)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    n_keys = slots.numel()
    if n_keys == 0:
        return
    grid = ((n_keys + BLOCK_KEYS - 1) // BLOCK_KEYS,)
    words, halves = flat.view(torch.float32), flat.view(torch.int16)  # the same bytes as f32 scales, bf16 rope
    _kernel(fastpath.interpreting())[grid](
        flat, words, halves, slots, keys.view(torch.int16), n_keys, BLOCK=BLOCK_KEYS, ARITH=variant == "arith", num_warps=NUM_WARPS
    )


def usable(flat: torch.Tensor) -> bool:
    """Whether launch can decode from this flat cache (layout only; the device: kernel.fastpath.choose(FAST_PATH, device))."""
    return (
        flat.dim() == 2
        and flat.shape[0] > 0
        and flat.shape[1] == RECORD_BYTES
        and flat.dtype == torch.uint8
        and flat.is_contiguous()
        and flat.data_ptr() % 16 == 0
    )


def torch_decode(flat: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The torch path launch reproduces: bf16 [N, 576], dequantise_bf16 of flat[slots], the
    records of masked slots (slots < 0) zeroed first (+0 keys), as kernel.peers.keys does."""
    records = index_records(flat, slots.clamp_min(0))
    record_words(records).masked_fill_((slots < 0).view(-1, 1), 0)
    return dequantise_bf16(records)


def self_check(device: torch.device, variant: str) -> bool:
    """Whether launch with `variant` gives torch_decode's bits on kernel.fastpath.check_records
    (every bit, NaN payloads included)."""
    flat, slots = fastpath.check_records(device)
    want = torch_decode(flat, slots)
    got = torch.full_like(want, 1.0)
    launch(flat, slots, got, variant)
    return bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))


def _eligible(device: torch.device, variant: str) -> str:
    if device.type != "cuda":
        return "needs a CUDA device"
    return "" if fastpath.have_triton() else "Triton is not installed"


FAST_PATH = fastpath.register(fastpath.FastPath("peers.bf16-keys", VARIANTS, self_check, _eligible)).name


# the kernel's constants
assert LATENT_DIM == 512 and RECORD_BYTES == 656 and SCALE_OFFSET == 512 and ROPE_OFFSET == 528 and HEAD_DIM == 576

__all__ = ["BLOCK_KEYS", "FAST_PATH", "VARIANTS", "launch", "self_check", "torch_decode", "usable"]
