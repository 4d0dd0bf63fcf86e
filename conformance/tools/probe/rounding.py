"""Exact rounding of float64 values to narrow formats in a chosen mode (the candidates' arithmetic).

`round_to(x, fmt, mode)`: x float64, fmt "bf16" | "fp16" | "f32", mode "rn" (nearest even),
"rz" (toward zero) or "ra" (nearest, ties away); subnormals on the format's grid; returned as
float64. Used to predict a kernel's output under each candidate model; exact for finite inputs
inside the format's range (the scaled significand stays below 2^53).
"""

from __future__ import annotations

import torch

#: (significand bits incl. the hidden one, smallest normal exponent) per format
FORMATS: dict[str, tuple[int, int]] = {"bf16": (8, -126), "fp16": (11, -14), "f32": (24, -126)}


def _pow2(k: torch.Tensor) -> torch.Tensor:
    return ((k.to(torch.int64).clamp(-1022, 1023) + 1023) << 52).view(torch.float64)


def round_to(x: torch.Tensor, fmt: str, mode: str = "rn") -> torch.Tensor:
    """x rounded to `fmt` in `mode` (see the module docstring), as float64."""
    bits, emin = FORMATS[fmt]
    x = x.to(torch.float64)
    _, e = torch.frexp(x)  # x = m 2^e, 0.5 <= |m| < 1
    step = _pow2(torch.clamp_min(e - 1, emin) - (bits - 1))
    scaled = x / step
    if mode == "rn":
        q = torch.round(scaled)
    elif mode == "rz":
        q = torch.trunc(scaled)
    elif mode == "ra":
        q = torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)
    else:
        raise ValueError(f"mode: expected 'rn', 'rz' or 'ra', got {mode!r}")
    return torch.where(x == 0, x, q * step)
