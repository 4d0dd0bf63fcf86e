"""Triton's CPU interpreter rounds f32 -> float8e4nv wrong where the rounding carries into an odd
exponent: the carry is lost (standalone reproducer; no project code).

A one-line Triton kernel, `y = x.to(y.dtype.element_ty)` with y float8_e4m3fn, run under
TRITON_INTERPRET=1 on CPU tensors, against torch's round-to-nearest-even cast (what the GPU's
cvt.rn.satfinite.e4m3x2.f32 gives; sglang's quantiser wrote -8 for -7.97 on an H200). Seen with
Triton 3.9.0 and torch 2.13 (CPU): 1.99 -> 1 (want 2), 7.97 -> 4 (want 8), 31.88 -> 16 (want 32),
while 0.99 -> 1, 15.9 -> 16 and 250 -> 256 are right: the mantissa's carry reaches the exponent
field only when the field's lowest bit is 0 (exponent fields 7, 9, 11 lose it; 6, 10, 14 keep it).
This is why kernel.writers.sglang is not offered on a machine without CUDA.

Usage: python repro/triton_interpreter_fp8_carry.py   (exit 1 when the interpreter differs)
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _cast(x_ptr, y_ptr, n: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.arange(0, n)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(y_ptr.dtype.element_ty))


def main() -> int:
    values = [1.99, 7.97, 31.88, 0.99, 15.9, 250.0, 1.9, 240.0]
    x = torch.zeros(16, dtype=torch.float32)
    x[: len(values)] = torch.tensor(values)
    y = torch.empty(16, dtype=torch.float8_e4m3fn)
    _cast[(1,)](x, y, n=16)
    got = y[: len(values)].float().tolist()
    want = x[: len(values)].to(torch.float8_e4m3fn).float().tolist()
    print(f"triton {triton.__version__}, torch {torch.__version__}, TRITON_INTERPRET=1")
    print(f"{'x':>10} {'interpreter':>12} {'round-to-nearest':>17}")
    for v, g, w in zip(values, got, want, strict=True):
        print(f"{v:>10} {g:>12} {w:>17}{'   <- differs' if g != w else ''}")
    return 1 if got != want else 0


if __name__ == "__main__":
    sys.exit(main())
