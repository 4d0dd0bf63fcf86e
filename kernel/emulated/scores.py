"""The emulated kernel's QK accumulation of one group of tiles: the MFMAs' f64 terms into f32
scores.

For each row r, head h and key n of the group (n = 128 t + key of tile t):

    s[j, g]  = ((d[0, j, g] f[0] + d[1, j, g] f[1]) + d[2, j, g] f[2]) + d[3, j, g] f[3]   (f64)
    acc      = 0, then acc = f32(acc + s[j, h]), acc = f32(acc + s[j, H + h]) for j = 0..3
    acc      = f32(acc + rope[r, t, i, h, key])  for i = 0, 1

with d = dots[r, 4 b + j, g, n] (the exact per-MFMA dots of the unscaled keys, g over the 2H hi
and lo rows), f[b] = k_factor[r, n, b] (the key's E8M0 factor of block b: d f[b] is exact) and
rope the two rope MFMAs' sums. `accumulate` runs it as torch operations (`accumulate_torch`, on
every device) or on CUDA as one Triton kernel (`accumulate_triton`: dots read once, no f64
[rows, 4, 2H, keys] partial sums written): the fast path `emulated.scores` (kernel.fastpath; off
with CONFORMANCE_FAST_PATHS=emulated.scores=off or emulated.state=off), used only after it
reproduced accumulate_torch's bits on a probe (NaN compared as NaN).

Shapes: dots f64 [rows, 16, 2H, keys]; k_factor f64 [rows, keys, 4]; rope f64
[rows * tiles, 2, H, 128]; returns f32 [rows, H, keys].
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from kernel import fastpath
from kernel.emulated.state import FAST_PATH as STATE_PATH
from kernel.emulated.state import _on, eligible

FAST_PATH = "emulated.scores"
TILE = 128


def accumulate_torch(dots: torch.Tensor, k_factor: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """The accumulation as torch operations."""
    rows, _, two_h, n_keys = dots.shape
    heads, tiles = two_h // 2, n_keys // TILE
    d = dots.view(rows, 4, 4, two_h, n_keys)
    f = k_factor.transpose(1, 2)[:, :, None, None, :]  # [rows, b, 1, 1, keys]
    scaled = d[:, 0] * f[:, 0]  # [rows, j, 2H, keys]
    for b in range(1, 4):
        scaled.addcmul_(d[:, b], f[:, b])  # + the exact product, rounded once
    acc = torch.zeros(rows, heads, n_keys, dtype=torch.float32, device=dots.device)
    for j in range(4):
        torch.add(acc, scaled[:, j, :heads], out=acc)
        torch.add(acc, scaled[:, j, heads:], out=acc)
    acc_tiles = acc.view(rows, heads, tiles, TILE)
    rope_tiles = rope.view(rows, tiles, 2, heads, TILE).permute(0, 2, 3, 1, 4)  # [rows, i, H, tile, key]
    for i in range(2):
        torch.add(acc_tiles, rope_tiles[:, i], out=acc_tiles)
    return acc


@functools.cache
def _kernel(interpret: bool) -> Callable[..., object]:
    """The Triton kernel (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit
    def accumulate(dots_ptr, factor_ptr, rope_ptr, acc_ptr, heads, tiles):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)  # (row, head)
        t = tl.program_id(1)  # tile
        row = pid // heads
        head = pid % heads
        n_keys = tiles * 128
        key = t * 128 + tl.arange(0, 128)
        row64 = row.to(tl.int64)  # (row is a tensor; sizes of 1 may arrive as constants)
        plane = 2 * heads * n_keys  # one (b, j) of a row's dots
        row_dots = dots_ptr + row64 * 16 * plane
        row_factor = factor_ptr + (row64 * n_keys + key) * 4
        f0 = tl.load(row_factor)
        f1 = tl.load(row_factor + 1)
        f2 = tl.load(row_factor + 2)
        f3 = tl.load(row_factor + 3)
        acc = tl.zeros([128], dtype=tl.float32)
        for j in tl.static_range(4):
            for half in tl.static_range(2):
                g = (half * heads + head) * n_keys + key
                s = tl.load(row_dots + j * plane + g) * f0
                s = s + tl.load(row_dots + (4 + j) * plane + g) * f1
                s = s + tl.load(row_dots + (8 + j) * plane + g) * f2
                s = s + tl.load(row_dots + (12 + j) * plane + g) * f3
                acc = (acc.to(tl.float64) + s).to(tl.float32)
        rt = (row * tiles + t).to(tl.int64)
        for i in tl.static_range(2):
            r = tl.load(rope_ptr + ((rt * 2 + i) * heads + head) * 128 + tl.arange(0, 128))
            acc = (acc.to(tl.float64) + r).to(tl.float32)
        tl.store(acc_ptr + (row64 * heads + head) * n_keys + key, acc)

    return accumulate


def accumulate_triton(dots: torch.Tensor, k_factor: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """The accumulation by the Triton kernel."""
    rows, _, two_h, n_keys = dots.shape
    heads, tiles = two_h // 2, n_keys // TILE
    if not (dots.is_contiguous() and k_factor.is_contiguous() and rope.is_contiguous()):
        raise ValueError("accumulate_triton needs contiguous dots, k_factor and rope")
    acc = torch.empty(rows, heads, n_keys, dtype=torch.float32, device=dots.device)
    options = {} if fastpath.interpreting() else {"enable_fp_fusion": False, "num_warps": 4}
    with _on(dots.device):
        _kernel(fastpath.interpreting())[(rows * heads, tiles)](dots, k_factor, rope, acc, heads, tiles, **options)  # type: ignore[index]
    return acc


PROBE_SHAPES = ((3, 2, 3), (2, 1, 1), (1, 1, 16), (1, 16, 2))  # (rows, tiles, heads), as emulated_state's


def probe_inputs(device: torch.device, rows: int = 3, tiles: int = 2, heads: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rows x tiles x heads of dots, factors and rope sums of every class (huge and tiny
    factors, NaN factors, zeros of both signs, infinities and NaN in rope)."""
    g = torch.Generator().manual_seed(29 + rows * 1000 + tiles * 10 + heads)
    n_keys = tiles * TILE
    dots = torch.randn(rows, 16, 2 * heads, n_keys, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-60, 60, (rows, 16, 2 * heads, n_keys), generator=g).double()
    )
    dots[0, 3, 2 * heads - 1, :7] = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.0**-60, 3.0e20, float("nan")], dtype=torch.float64)
    exponents = torch.randint(0, 256, (rows, n_keys, 4), generator=g)
    k_factor = torch.where(exponents == 255, float("nan"), torch.exp2((exponents - 127).double()))
    rope = torch.randn(rows * tiles, 2, heads, TILE, generator=g, dtype=torch.float64) * 1e3
    rope[-1, 0, 0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0], dtype=torch.float64)
    return dots.to(device), k_factor.to(device), rope.to(device)


def self_check(device: torch.device) -> bool:
    """Whether accumulate_triton gives accumulate_torch's bits on the probe's groups on `device`."""
    for shape in PROBE_SHAPES:
        dots, k_factor, rope = probe_inputs(device, *shape)
        if not fastpath.same_bits(accumulate_torch(dots, k_factor, rope), accumulate_triton(dots, k_factor, rope)):
            return False
    return True


fastpath.register(fastpath.FastPath(FAST_PATH, ("triton",), lambda device, variant: self_check(device), eligible, needs=(STATE_PATH,)))


def accumulate(dots: torch.Tensor, k_factor: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """The accumulation: the kernel where the fast path FAST_PATH gives it, else torch operations."""
    if fastpath.choose(FAST_PATH, dots.device) is not None:
        try:
            return accumulate_triton(dots, k_factor, rope)
        except Exception as err:  # noqa: BLE001 - a shape the kernel does not compile for: torch
            warnings.warn(f"emulated: Triton QK accumulation failed ({type(err).__name__}: {err}); using torch", stacklevel=2)
    return accumulate_torch(dots, k_factor, rope)
