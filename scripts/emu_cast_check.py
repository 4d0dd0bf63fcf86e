"""Do the emulated kernel's fast conversions give the rule's bits on this device and torch?

- kernel.backends.emulated.e4m3_codes (torch's float8_e4m3fn cast where it is the rule) against
  kernel.fp8.encode_e4m3(saturate=False) on every f32 bit pattern (--exhaustive: all 2^32, in
  chunks; else 2^24 random ones and every exponent's rounding boundaries);
- the f32 e4m3 table widened to f64 (quantize_q's hi) against the f64 table, bit for bit (NaN);
- every f32 NaN (signs, payloads) converted to bf16 gives one bit pattern (the emulator's
  outputs do not depend on NaN payloads because of it; see kernel/backends/emulated.py).

Prints one line per check; exit status 1 when any differs.

Usage: python3 scripts/emu_cast_check.py [--device cuda] [--exhaustive] [--chunk-log2 26]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.backends.emulated import e4m3_codes  # noqa: E402
from kernel.fp8 import e4m3_table, encode_e4m3  # noqa: E402


def mismatches(bits: torch.Tensor) -> int:
    """Patterns (int64 in [0, 2^32)) whose fast code differs from the rule's."""
    x = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
    return int((e4m3_codes(x) != encode_e4m3(x, saturate=False)).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--exhaustive", action="store_true")
    parser.add_argument("--chunk-log2", type=int, default=26)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    began = time.monotonic()
    chunk = 1 << args.chunk_log2
    bad = 0
    if args.exhaustive:
        for start in range(0, 1 << 32, chunk):
            bad += mismatches(torch.arange(start, start + chunk, dtype=torch.int64, device=device))
        what = "all 2^32 f32 patterns"
    else:
        g = torch.Generator(device=device).manual_seed(29)
        bad += mismatches(torch.randint(0, 2**32, (1 << 24,), generator=g, dtype=torch.int64, device=device))
        what = "2^24 random f32 patterns"
    print(f"e4m3_codes vs encode_e4m3 on {what} ({device}): {bad} differ ({time.monotonic() - began:.1f} s)")
    wide = e4m3_table(device, torch.float32).to(torch.float64).view(torch.int64)
    same_nan = torch.equal(wide, e4m3_table(device, torch.float64).view(torch.int64))
    print(f"f32 e4m3 table widened to f64 vs the f64 table ({device}): {'same bits' if same_nan else 'DIFFERS'}")
    payloads = torch.arange(1, 1 << 23, 4093, dtype=torch.int64, device=device)
    nan_bits = torch.cat([payloads | 0x7F800000, payloads | 0xFF800000, torch.tensor([0x7FC00000, 0xFFC00000], device=device)])
    nans = torch.where(nan_bits >= 2**31, nan_bits - 2**32, nan_bits).to(torch.int32).view(torch.float32)
    patterns = torch.unique(nans.to(torch.bfloat16).view(torch.int16)).tolist()
    one_nan = len(patterns) == 1
    shown = [hex(v & 0xFFFF) for v in patterns[:4]]
    print(f"bf16 of {nans.numel()} f32 NaNs ({device}): {'one pattern' if one_nan else 'SEVERAL patterns'} {shown}")
    return 0 if bad == 0 and same_nan and one_nan else 1


if __name__ == "__main__":
    raise SystemExit(main())
