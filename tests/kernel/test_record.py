"""Record codec: layout, the three writers, exact decoding."""

from __future__ import annotations

import struct

import pytest
import torch

from kernel.fp8 import decode_e4m3
from kernel.record import (
    MAX_LATENT_FOR_VALID_SCALE,
    RECORD_BYTES,
    decode_records,
    encode_records,
    record_rope,
    record_scales,
    writer_scales,
)


def _rows(n: int, seed: int = 0, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    latent = (torch.randn(n, 512, generator=generator) * scale).to(torch.bfloat16)
    rope = torch.randn(n, 64, generator=generator).to(torch.bfloat16)
    return latent, rope


def test_layout_is_codes_scales_rope_little_endian() -> None:
    latent = torch.zeros(1, 512, dtype=torch.float32)
    latent[0, 0] = 1.0  # block 0 amax 1 -> pow2 scale 2^-8, code of 1.0 / 2^-8 = 256 -> 0x78
    latent[0, 130] = -3.0  # block 1 amax 3 -> scale 2^-7, -3 / 2^-7 = -384 -> 0xFC
    rope = torch.zeros(1, 64, dtype=torch.bfloat16)
    rope[0, 0] = 1.5
    record = encode_records(latent, rope, "pow2")
    assert record.shape == (1, RECORD_BYTES)
    raw = bytes(record[0].tolist())
    assert raw[0] == 0x78 and raw[130] == 0xFC
    scales = struct.unpack("<4f", raw[512:528])
    assert scales == (2.0**-8, 2.0**-7, 2.0**-22, 2.0**-22)  # empty blocks: pow2ceil(1e-4 / 448)
    assert raw[528:530] == struct.pack("<e", 1.5)[:0] + bytes([0xC0, 0x3F])  # bf16 1.5 = 0x3FC0
    assert record_rope(record)[0, 0] == 1.5
    assert record_scales(record)[0].tolist() == list(scales)


@pytest.mark.parametrize("writer", ["pow2", "pow2-floor", "raw"])
def test_writers_reconstruct_within_e4m3_rounding(writer: str) -> None:
    latent, rope = _rows(64, seed=1, scale=3.0)
    records = encode_records(latent, rope, writer)
    decoded = decode_records(records)
    x = latent.double()
    scales = decoded.scales.double().repeat_interleave(128, dim=-1)
    err = (decoded.latent - x).abs()
    # e4m3 RNE: relative 2^-4 for normal codes, absolute half the subnormal step below 2^-6
    assert bool((err <= torch.maximum(x.abs() * 2.0**-4, scales * 2.0**-10) * (1 + 1e-6)).all())
    assert torch.equal(decoded.rope, rope.double())


def test_pow2_writers_store_powers_of_two_and_raw_does_not() -> None:
    latent, rope = _rows(32, seed=2)
    for writer in ("pow2", "pow2-floor"):
        scales = record_scales(encode_records(latent, rope, writer))
        bits = scales.view(torch.int32)
        assert bool(((bits & 0x7FFFFF) == 0).all()), writer
    raw = record_scales(encode_records(latent, rope, "raw"))
    assert bool(((raw.view(torch.int32) & 0x7FFFFF) != 0).any())


def test_writer_scale_rules() -> None:
    amax = torch.tensor([0.0, 1e-6, 1.0, 448.0, 449.0, MAX_LATENT_FOR_VALID_SCALE, 57345.0], dtype=torch.float32)
    assert writer_scales(amax, "pow2").tolist() == [2.0**-22, 2.0**-22, 2.0**-8, 1.0, 2.0, 128.0, 256.0]
    assert writer_scales(amax, "pow2-floor").tolist() == [2.0**-13, 2.0**-13, 2.0**-8, 1.0, 2.0, 128.0, 256.0]
    raw = writer_scales(amax, "raw")
    assert raw[0] == 2.0**-126 and raw[2] == torch.tensor(1.0 / 448.0, dtype=torch.float32)
    with pytest.raises(ValueError, match="unknown writer"):
        writer_scales(amax, "pow3")  # type: ignore[arg-type]


def test_57344_is_the_largest_latent_with_scale_at_most_2_to_7() -> None:
    latent = torch.zeros(2, 512, dtype=torch.float32)
    latent[0, 0] = 57344.0
    latent[1, 0] = 57600.0  # the next bf16 value
    scales = record_scales(encode_records(latent, torch.zeros(2, 64, dtype=torch.bfloat16), "pow2"))
    assert scales[0, 0] == 128.0 and scales[1, 0] == 256.0


def test_codes_saturate_and_decode_exactly() -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    record = torch.zeros(1, RECORD_BYTES, dtype=torch.uint8)
    record[0, :256] = codes
    record[0, 256:512] = codes
    record[0, 512:528] = torch.tensor([0.5, 2.0, 4.0, 2.0**-20], dtype=torch.float32).view(torch.uint8)
    decoded = decode_records(record)
    expected_block0 = decode_e4m3(codes[:128]) * 0.5
    assert torch.equal(decoded.latent[0, :128].nan_to_num(7.0), expected_block0.nan_to_num(7.0))
    assert torch.isnan(decoded.latent[0, 127])  # code 0x7F is NaN
    assert decoded.latent[0, 256 + 0x7E] == 448.0 * 4.0  # block 2, code 0x7E
    assert decoded.latent[0, 256 + 0xFE] == -448.0 * 2.0**-20  # block 3, code 0xFE


def test_bad_inputs_are_named() -> None:
    latent, rope = _rows(2)
    with pytest.raises(ValueError, match="latent last dim"):
        encode_records(latent[:, :511], rope, "pow2")
    with pytest.raises(TypeError, match="rope must be bf16"):
        encode_records(latent, rope.float(), "pow2")
    with pytest.raises(ValueError, match="non-finite"):
        encode_records(torch.full((1, 512), float("inf")), rope[:1], "pow2")
    with pytest.raises(ValueError, match="record width"):
        decode_records(torch.zeros(1, 655, dtype=torch.uint8))
    with pytest.raises(TypeError, match="uint8"):
        decode_records(torch.zeros(1, 656, dtype=torch.int8))


@pytest.mark.parametrize("writer", ["pow2", "pow2-floor", "raw"])
def test_known_finite_latent_skips_only_the_scan(writer: str) -> None:
    """latent_known_finite=True gives the same records for finite values (the scan alone is
    skipped: no device read), including zero blocks and values at the scales' floors."""
    latent, rope = _rows(4)
    latent[1, :128] = 0.0
    latent[2, 128:256] = 2.0**-30
    latent[3] = latent[3] * 57344.0
    assert torch.equal(encode_records(latent, rope, writer, latent_known_finite=True), encode_records(latent, rope, writer))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown writer"):
        encode_records(latent, rope, "pow3", latent_known_finite=True)  # type: ignore[arg-type]
