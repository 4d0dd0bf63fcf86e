"""Records that cover a key decode's inputs, for a device kernel's bit-for-bit self-check.

probe_records(device) gives a flat cache and the slots to decode from it: every e4m3 code in
every scale block under f32 scales of every class (PROBE_SCALES: normal, non-power-of-two,
subnormal, +-0, negative, +-inf, NaN, the f32 extremes), every bf16 rope bit pattern, and masked
slots (-1) in between. A fused decode is used on a device only after it reproduced the torch
path's bits on these records (oracle.key_decode: f64 keys; kernel.peers.bf16_key_decode:
bf16 keys).
"""

from __future__ import annotations

import torch

from kernel.record import LATENT_DIM

# f32 scales of every class the probe decodes each code under (normal, non-pow2, subnormal, +-0, <0, +-inf, NaN, extremes)
PROBE_SCALES = (
    1.0,
    2.0**-10,
    3.7e-5,
    1e-40,
    0.0,
    -0.0,
    -2.5,
    float("inf"),
    float("-inf"),
    float("nan"),
    3.4028235e38,
    2.0**-126,
    2.0**-149,
    448.0,
    2.0**7,
    -(2.0**-140),
    0.1,
)


def probe_records(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat uint8 [1024, 656], slots int64 [1100]) covering the decode's inputs: every code in
    every scale block under scales of every class (normal, non-power-of-two, subnormal, +-0,
    negative, +-inf, NaN, f32 extremes), every bf16 rope bit pattern, masked slots in between."""
    n = 1024
    pos = torch.arange(n * LATENT_DIM, dtype=torch.int64).view(n, LATENT_DIM)
    codes = ((pos * 37 + pos // LATENT_DIM) % 256).to(torch.uint8)  # every code in every block, rotating
    special = torch.tensor(PROBE_SCALES, dtype=torch.float32)
    scales = special[torch.arange(n * 4) % special.numel()].view(n, 4)
    rope = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(n, 64)  # all bf16 patterns
    flat = torch.cat((codes, scales.view(torch.uint8).view(n, 16), rope.view(torch.uint8).view(n, 128)), dim=1)
    slots = torch.arange(n, dtype=torch.int64).flip(0)
    slots = torch.cat((slots, torch.full((76,), -1, dtype=torch.int64)))[torch.randperm(n + 76, generator=torch.Generator().manual_seed(0))]
    return flat.to(device), slots.to(device)


__all__ = ["PROBE_SCALES", "probe_records"]
