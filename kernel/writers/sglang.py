"""sglang's writer of fp8_ds_mla records, as a writer the strategies can draw (`writer "sglang"`).

The records come from sglang 0.5.10.post1's own Triton quantiser
(`sglang/srt/layers/attention/nsa/quant_k_cache.py`), called as its KV pool calls it when it stores
a DeepSeek-V3.2 token in the fp8 cache (`MLATokenToKVPool.set_mla_kv_buffer`, CUDA path):

    nope_part, rope_part = quantize_k_cache_separate(k_nope, k_rope)
    #   k_nope bf16 [n, 1, 512], k_rope bf16 [n, 1, 64]
    #   -> nope_part uint8 [n, 1, 528] = 512 e4m3 codes | 4 f32 scales, rope_part uint8 [n, 1, 128]
    set_mla_kv_buffer_triton(kv_buffer, loc, nope_part, rope_part)
    #   token i's 656-byte slot at loc[i] = nope_part[i] | rope_part[i]

Here the placement step is torch indexing (strategies.materialize writes the records at their
cache rows as for every writer); the bytes are the quantiser's. What it stores (read from its
source, measured on the H200: docs/explanation/peers.md): scale = amax / 448 per 128-value tile as Triton
divides (never a power of two in practice; 0 for an all-zero tile), codes = e4m3 of
clamp(x * (1 / scale), +-448) (an all-zero tile: 0 * inf = NaN clamps to 448, code 0x7E, decoded
0 x 448 = 0), rope bytes copied. Such records break the power-of-two scale precondition almost
everywhere, so recipes with this writer are judged as any cache: through the precondition-violation
route for profiles that need power-of-two scales, by the differential verdict otherwise.

Availability (`unavailable_reason`, "" when usable): a CUDA device, Triton, sglang's module
importable (kernel.engines.load_sglang), and one trial write that passes the check
below. The device the records end up on does not matter: on a machine with CUDA, a cache
materialised on the CPU gets the bytes the GPU wrote (one function of the input on every
device). Without CUDA the writer is absent: Triton's CPU interpreter (TRITON_INTERPRET=1, Triton
3.9) does run this kernel on CPU tensors, but writes other bytes than the H200 did for the same
input: every scale IEEE-rounded where the H200's division left 9330 of 16384 one ulp away, and
codes whose rounding carries into the next binade written a binade low (-4 for -7.97 at a scale
where the H200 wrote -8), which this writer's own check refuses; measured on the H200's 4096
records (`python -m conformance dumps sglang-writer --out DIR --interpreter --compare-with FILE`).

Every write is checked (`rounding_failures`): the records decoded by kernel.record.decode_records
must be the bf16 input within the format's rounding, else SglangWriterError (a writer not called
as the engine calls it, or a broken import route, never passes silently).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from types import ModuleType

import torch

from kernel.backend import BackendUnavailable
from kernel.fp8 import decode_e4m3, pow2
from kernel.record import LATENT_DIM, N_SCALE_BLOCKS, RECORD_BYTES, ROPE_DIM, ROPE_OFFSET, SCALE_BLOCK, decode_records

NAME = "sglang"
QUANT_MODULE = "sglang.srt.layers.attention.nsa.quant_k_cache"
DISABLE_ENV = "CONFORMANCE_SGLANG_WRITER"  # "0": the writer is not drawn even where it runs
WRITE_DEVICE = "cuda"  # where the quantiser runs (records are then moved to the caller's device)
CHECK_ROWS = 1 << 14  # records decoded and compared per pass (bounds the f64 temporaries)
# Rounding allowances of the check (rounding_failures), from the kernel's arithmetic:
SCALE_ULPS = 2  # scale = amax / 448 by Triton's f32 division (PTX div.full.f32: at most 2 ulp)
Y_REL = 2.0**-20  # y = x * (1 / scale) in f32: the reciprocal (<= 2 ulp) and the product (0.5 ulp) move y by < 2^-21 |y|
E4M3_MIN_NORMAL = 2.0**-6
E4M3_SUBNORMAL_HALF = 2.0**-10  # half the e4m3 subnormal spacing 2^-9


class SglangWriterError(RuntimeError):
    """sglang's writer wrote records that do not decode to its input within the format's rounding."""


class WriterUnavailable(RuntimeError):
    """The sglang writer cannot run here; the message says why (one line)."""


def _cuda_triton_reason() -> str:
    if getattr(torch.version, "hip", None):
        return f"sglang writer: sglang's quantiser is used on NVIDIA GPUs only; this torch is built for ROCm ({torch.__version__})"
    if not torch.cuda.is_available():
        return (
            f"sglang writer: needs a CUDA device (torch {torch.__version__}); sglang's quantiser is a Triton kernel, and Triton's "
            "CPU interpreter (TRITON_INTERPRET=1) runs it but writes other bytes than the H200 (IEEE scales, codes a binade low "
            "where rounding carries: python -m conformance dumps sglang-writer --interpreter)"
        )
    if importlib.util.find_spec("triton") is None:
        return "sglang writer: Triton is not installed"
    return ""


@functools.cache
def _probe() -> tuple[ModuleType | None, str]:
    """(sglang's quantiser module, "") where the writer runs, else (None, why not); once per process."""
    if os.environ.get(DISABLE_ENV, "").strip() == "0":
        return None, f"sglang writer: disabled by ${DISABLE_ENV}=0"
    reason = _cuda_triton_reason()
    if reason:
        return None, reason
    from kernel.engines import load_sglang

    try:
        module = load_sglang(QUANT_MODULE, "sglang writer")[0]
    except BackendUnavailable as err:
        return None, str(err)
    try:  # one trial write: a normal row and an all-zero first tile
        latent = torch.zeros(2, LATENT_DIM, dtype=torch.bfloat16, device="cuda")
        latent[0] = torch.linspace(-3, 5, LATENT_DIM, device="cuda").to(torch.bfloat16)
        latent[1, SCALE_BLOCK:] = 0.25
        rope = torch.linspace(-1, 1, 2 * ROPE_DIM, device="cuda").view(2, ROPE_DIM).to(torch.bfloat16)
        failures = rounding_failures(quantise(module, latent, rope), latent, rope)
    except Exception as err:  # noqa: BLE001 - any failure of the engine's kernel means: not usable here
        return None, f"sglang writer: the trial write failed ({type(err).__name__}: {str(err)[:200]})"
    if failures:
        return None, "sglang writer: the trial write does not decode to its input: " + "; ".join(failures)
    return module, ""


def unavailable_reason() -> str:
    """Why the sglang writer cannot run here; "" when it can (module docstring)."""
    return _probe()[1]


def available() -> bool:
    """The sglang writer runs here (strategies draw it only then)."""
    return not unavailable_reason()


def quantise(module: ModuleType, latent: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 656] records of latent bf16 [n, 512] and rope bf16 [n, 64] (CUDA) by sglang's
    quantize_k_cache_separate, called as its KV pool calls it ([n, 1, dim] views), each token's
    nope part (codes | scales) then rope part, as set_mla_kv_buffer_triton lays them in a slot.
    Launched in pieces of fewer than 2^31 / 656 tokens (the kernel's row offsets are int32)."""
    from kernel.engines import int32_chunks

    n = latent.shape[0]
    records = torch.empty(n, RECORD_BYTES, dtype=torch.uint8, device=latent.device)
    for start, stop in int32_chunks(n, RECORD_BYTES):
        nope_part, rope_part = module.quantize_k_cache_separate(latent[start:stop].unsqueeze(1), rope[start:stop].unsqueeze(1))
        records[start:stop, :ROPE_OFFSET] = nope_part.view(torch.uint8).reshape(stop - start, ROPE_OFFSET)
        records[start:stop, ROPE_OFFSET:] = rope_part.view(torch.uint8).reshape(stop - start, RECORD_BYTES - ROPE_OFFSET)
    return records


def _floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 x) (int64) of positive finite f64 x, exact (frexp: x = m 2^e, m in [0.5, 1))."""
    return torch.frexp(x).exponent.to(torch.int64) - 1


def _pass_failures(records: torch.Tensor, latent: torch.Tensor, rope: torch.Tensor) -> dict[str, int]:
    """Counts of each failure kind over one pass of rounding_failures."""
    n = records.shape[0]
    x = latent.to(torch.float64).view(n, N_SCALE_BLOCKS, SCALE_BLOCK)
    decoded = decode_records(records)
    scales = decoded.scales.to(torch.float64)
    amax = x.abs().amax(dim=-1)
    live = amax > 0
    exact = torch.where(live, amax / 448.0, 1.0)  # the scale in f64 (1.0: a placeholder for zero tiles)
    ulp = pow2((_floor_log2(exact) - 23).clamp_min(-149))  # f32 spacing at amax / 448
    scale_bad = live & ~((scales - exact).abs() <= SCALE_ULPS * ulp)
    codes = decode_e4m3(decoded.codes, torch.float64).view(n, N_SCALE_BLOCKS, SCALE_BLOCK)
    safe = torch.where(live & (scales > 0), scales, 1.0).unsqueeze(-1)
    y = x / safe
    mag = y.abs()
    half = torch.where(mag >= E4M3_MIN_NORMAL, pow2(_floor_log2(mag.clamp_min(E4M3_MIN_NORMAL)) - 4), E4M3_SUBNORMAL_HALF)
    code_bad = live.unsqueeze(-1) & ~((codes - y).abs() <= half + mag * Y_REL)
    zero_bad = ~live.unsqueeze(-1) & ~(decoded.latent.view(n, N_SCALE_BLOCKS, SCALE_BLOCK) == 0)
    rope_bad = ~(records[:, ROPE_OFFSET:] == rope.contiguous().view(torch.uint8).view(n, 2 * ROPE_DIM)).all(dim=-1)
    counts = torch.stack([scale_bad.sum(), code_bad.sum(), zero_bad.sum(), rope_bad.sum()]).tolist()
    return dict(zip(("scales", "codes", "zero-tile values", "rope records"), counts, strict=True))


def rounding_failures(records: torch.Tensor, latent: torch.Tensor, rope: torch.Tensor) -> list[str]:
    """What in records uint8 [n, 656] is not latent bf16 [n, 512] / rope bf16 [n, 64] within the
    format's rounding (empty: every record is). Decoded by kernel.record.decode_records:
    - a tile with amax > 0: its f32 scale within SCALE_ULPS ulp of amax / 448, and every code c
      within half an e4m3 spacing of y = x / scale (plus Y_REL |y|, y's own f32 rounding);
      saturation at +-448 stays inside that, since |y| <= 448 (1 + 2^-21) at such a scale;
    - an all-zero tile: every decoded value exactly 0 (code x scale; a NaN code fails);
    - rope: the input's bf16 bytes exactly.
    One host read per CHECK_ROWS records."""
    if records.shape != (latent.shape[0], RECORD_BYTES) or latent.shape[-1] != LATENT_DIM or rope.shape != (latent.shape[0], ROPE_DIM):
        raise ValueError(f"records {tuple(records.shape)}, latent {tuple(latent.shape)} and rope {tuple(rope.shape)} do not match")
    totals = {"scales": 0, "codes": 0, "zero-tile values": 0, "rope records": 0}
    for start in range(0, records.shape[0], CHECK_ROWS):
        stop = min(records.shape[0], start + CHECK_ROWS)
        for kind, count in _pass_failures(records[start:stop], latent[start:stop], rope[start:stop]).items():
            totals[kind] += count
    return [f"{count} {kind} outside the format's rounding" for kind, count in totals.items() if count]


def write_records(latent: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Records uint8 [..., 656] on latent's device of latent [..., 512] (bf16, or f32 holding bf16
    values: the engine stores bf16 activations) and rope bf16 [..., 64], written by sglang's
    quantiser on the CUDA device (module docstring) and checked (rounding_failures).
    WriterUnavailable where it cannot run, ValueError for a latent that is not bf16-valued,
    SglangWriterError when the records fail the check."""
    module, reason = _probe()
    if module is None:
        raise WriterUnavailable(reason)
    lead = latent.shape[:-1]
    flat = latent.reshape(-1, LATENT_DIM)
    gpu = flat.device if flat.device.type == WRITE_DEVICE else torch.device(WRITE_DEVICE)
    values = flat.to(gpu)
    nope = values.to(torch.bfloat16)
    if values.dtype != torch.bfloat16 and not bool((nope.to(values.dtype) == values).all()):
        raise ValueError("the sglang writer stores bf16 activations: latent holds values that are not bf16")
    rope_bf16 = rope.reshape(-1, ROPE_DIM).to(gpu)
    records = quantise(module, nope.contiguous(), rope_bf16.contiguous())
    failures = rounding_failures(records, nope, rope_bf16)
    if failures:
        raise SglangWriterError("sglang's quantiser wrote records that are not its input: " + "; ".join(failures))
    return records.to(latent.device).view(*lead, RECORD_BYTES)


__all__ = [
    "DISABLE_ENV",
    "NAME",
    "QUANT_MODULE",
    "SglangWriterError",
    "WriterUnavailable",
    "available",
    "quantise",
    "rounding_failures",
    "unavailable_reason",
    "write_records",
]
