"""The 656-byte fp8_ds_mla KV record: layout, the three writers found in the wild, exact decoding.

Record layout (bytes):
    [0, 512)    512 e4m3fn latent codes
    [512, 528)  4 little-endian f32 scales, scale b covers latent values [128 b, 128 b + 128)
    [528, 656)  64 little-endian bf16 rope values
Dequantised latent x[i] = code[i] * scale[i // 128]; K = [x, rope] (576 values), V = x.

Writers (scale per 128-value block from the block's amax, codes = e4m3 RNE of x / scale,
saturating at +-448):
    pow2        scale = pow2ceil(max(amax, 1e-4) / 448)            (the seed kernel's writer)
    pow2-floor  scale = pow2ceil(max(amax / 448, 1e-4))            (vLLM today; zero tile: 2^-13)
    raw         scale = max(amax / 448, FLT_MIN), any f32          (vLLM <= 0.26; violates the
                                                                    kernel's pow2 precondition)
Engine writers (ENGINE_WRITERS): records written by an engine's own code where it runs:
    sglang      sglang's Triton quantiser, scale = amax / 448 as Triton divides (kernel.writers.sglang)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from kernel.fp8 import decode_e4m3, encode_e4m3_finite_saturating, pow2_ceil_f32, pow2_ceil_positive_normal

RECORD_BYTES = 656
LATENT_DIM = 512
ROPE_DIM = 64
HEAD_DIM = LATENT_DIM + ROPE_DIM
SCALE_BLOCK = 128
N_SCALE_BLOCKS = LATENT_DIM // SCALE_BLOCK
SCALE_OFFSET = 512
ROPE_OFFSET = 528
MAX_VALID_SCALE = 2.0**7
MAX_LATENT_FOR_VALID_SCALE = 448.0 * MAX_VALID_SCALE  # 57344

Writer = Literal["pow2", "pow2-floor", "raw", "sglang"]
WRITERS: tuple[Writer, ...] = ("pow2", "pow2-floor", "raw", "sglang")
ENGINE_WRITERS: tuple[Writer, ...] = ("sglang",)  # run the engine's code: only where it runs
PRECONDITION_WRITERS: tuple[Writer, ...] = ("pow2", "pow2-floor")

_FLT_MIN = 2.0**-126


def writer_scales(block_amax: torch.Tensor, writer: Writer) -> torch.Tensor:
    """Per-block f32 scales [..., 4] that `writer` stores for latent blocks with these f32 amaxes."""
    return _writer_scales(block_amax, writer, pow2_ceil_f32)


@functools.cache
def _f32_448(device: torch.device) -> torch.Tensor:
    """448 as a 0-dim f32 tensor on `device` (made once, read only)."""
    return torch.tensor(448.0, dtype=torch.float32, device=device)


def _writer_scales(block_amax: torch.Tensor, writer: Writer, pow2_ceil: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The scale rules. x / 448 divides by a tensor on x's device, correctly rounded on every
    device: torch on CUDA turns a division by a Python number into a multiplication by its f32
    reciprocal, which differs from the division by an ulp for some amaxes (seen on the H200: raw
    writer scales differed from the CPU's)."""
    if block_amax.dtype != torch.float32:
        raise TypeError(f"block amax must be float32, got {block_amax.dtype}")
    c448 = _f32_448(block_amax.device)
    if writer == "pow2":
        floored = torch.clamp_min(block_amax, 1e-4)
        return pow2_ceil(floored / c448)
    if writer == "pow2-floor":
        return pow2_ceil(torch.clamp_min(block_amax / c448, 1e-4))
    if writer == "raw":
        return torch.clamp_min(block_amax / c448, _FLT_MIN)
    if writer in ENGINE_WRITERS:
        raise ValueError(f"writer {writer!r} is an engine's code, not a scale rule: kernel.writers.{writer}.write_records runs it")
    raise ValueError(f"unknown writer {writer!r}; expected one of {WRITERS}")


def encode_records(latent: torch.Tensor, rope: torch.Tensor, writer: Writer, *, latent_known_finite: bool = False) -> torch.Tensor:
    """Build records uint8 [..., 656] from latent [..., 512] (bf16 or f32) and rope [..., 64] (bf16).

    Latent values are taken as f32 (bf16 widens exactly). Non-finite latent values are refused
    (ValueError): no writer in the wild stores them. `latent_known_finite=True` skips that scan
    (one device read) for a caller whose values are finite by construction (strategies.materialize);
    non-finite values then give unspecified records. The engine writers (ENGINE_WRITERS) are the
    engines' code: kernel.writers.sglang.write_records (strategies.materialize calls it for them).
    Finite latent values make every block's amax finite, hence every scale rule's argument
    positive, normal and finite (the power-of-two rounding needs no check) and every quotient
    value / scale finite (the codes need no NaN or infinity handling).
    """
    if latent.shape[-1] != LATENT_DIM:
        raise ValueError(f"latent last dim must be {LATENT_DIM}, got {latent.shape[-1]}")
    if rope.shape[-1] != ROPE_DIM:
        raise ValueError(f"rope last dim must be {ROPE_DIM}, got {rope.shape[-1]}")
    if latent.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"latent must be bf16 or f32, got {latent.dtype}")
    if rope.dtype != torch.bfloat16:
        raise TypeError(f"rope must be bf16, got {rope.dtype}")
    if latent.shape[:-1] != rope.shape[:-1]:
        raise ValueError(f"latent rows {tuple(latent.shape[:-1])} and rope rows {tuple(rope.shape[:-1])} differ")
    x = latent.to(torch.float32)
    if not latent_known_finite and not bool(torch.isfinite(x).all()):
        raise ValueError("latent holds non-finite values")
    lead = x.shape[:-1]
    blocks = x.reshape(*lead, N_SCALE_BLOCKS, SCALE_BLOCK)
    scales = _writer_scales(blocks.abs().amax(dim=-1), writer, pow2_ceil_positive_normal)
    codes = encode_e4m3_finite_saturating((blocks / scales.unsqueeze(-1)).reshape(*lead, LATENT_DIM))
    return torch.cat(
        (codes, scales.contiguous().view(torch.uint8).reshape(*lead, 16), rope.contiguous().view(torch.uint8).reshape(*lead, 2 * ROPE_DIM)),
        dim=-1,
    )


@dataclass(frozen=True)
class DecodedRecords:
    """Exact float64 contents of records.

    latent: f64 [..., 512] = code * scale (NaN where the code is NaN);
    rope:   f64 [..., 64];
    scales: f32 [..., 4] as stored;
    codes:  uint8 [..., 512] as stored.
    """

    latent: torch.Tensor
    rope: torch.Tensor
    scales: torch.Tensor
    codes: torch.Tensor


def record_scales(records: torch.Tensor) -> torch.Tensor:
    """The 4 stored f32 scales of each record, [..., 4] (a copy)."""
    _check_records(records)
    return records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)


def record_rope(records: torch.Tensor) -> torch.Tensor:
    """The 64 stored bf16 rope values of each record, [..., 64] (a copy)."""
    _check_records(records)
    return records[..., ROPE_OFFSET:].contiguous().view(torch.bfloat16)


def decode_records(records: torch.Tensor) -> DecodedRecords:
    """Decode records uint8 [..., 656] into exact float64 latent and rope (code * scale is exact in f64)."""
    _check_records(records)
    codes = records[..., :SCALE_OFFSET]
    scales = record_scales(records)
    lead = records.shape[:-1]
    code_values = decode_e4m3(codes, torch.float64).reshape(*lead, N_SCALE_BLOCKS, SCALE_BLOCK)
    latent = (code_values * scales.to(torch.float64).unsqueeze(-1)).reshape(*lead, LATENT_DIM)
    rope = record_rope(records).to(torch.float64)
    return DecodedRecords(latent=latent, rope=rope, scales=scales, codes=codes)


def _check_records(records: torch.Tensor) -> None:
    if records.dtype != torch.uint8:
        raise TypeError(f"records must be uint8, got {records.dtype}")
    if records.shape[-1] != RECORD_BYTES:
        raise ValueError(f"record width must be {RECORD_BYTES} bytes, got {records.shape[-1]}")


def record_words(records: torch.Tensor) -> torch.Tensor:
    """Records uint8 [..., 656] (last dim contiguous) viewed as the widest integer words their
    address allows: int64 [..., 82], int32 [..., 164], int16 [..., 328], else the bytes. A gather
    or fill then moves one element per word, not per byte. Same memory, no copy."""
    for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if records.data_ptr() % size == 0 and all(s % size == 0 for s in records.stride()[:-1]):
            return records.view(dtype)
    return records


def index_records(flat: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 656]: the records of KV rows `slots` (int32 or int64 [N], each in [0, rows)) of
    the flat cache uint8 [rows, 656], gathered as whole words (record_words) by one index_select."""
    return record_words(flat).index_select(0, slots).view(torch.uint8)
