"""The emulated kernel's running-state updates of one group of tiles (o and l of every row).

For each row r of a group and each of its tiles t < counts[r], in tile order:

    o, l_parts = f32(o * alpha[r, t]), f32(l_parts * alpha[r, t])        (one buffer: new_state)
    l_parts    = f32(l_parts + psum[r, t])        (psum = lane_sums(p[r, t]): 8 keys per lane, in order)
    o          = f32(o + terms[r, t, kk])  for kk = 0..3                    (f64 sum, rounded to f32)

`advance` runs them either as torch operations, lane_sums and six per tile (`advance_torch`, on
every device), or on CUDA as one Triton kernel for the whole group (`advance_triton`: each
program keeps one (row, head)'s 528 state values in registers over the tiles and sums its P's
lanes itself, with the same IEEE f32 and f64 operations, no contraction into FMAs). The kernel
is the fast path `emulated.state` (kernel.fastpath, registered by kernel.emulated.gfx950, which
holds lane_sums): used on a device only after it reproduced advance_torch's bits on a probe
(`self_check`: subnormal, huge, zero, infinite and NaN values, rows ending inside the group; NaN
compared as NaN, the emulator models no payload); otherwise, or without Triton, or with
CONFORMANCE_FAST_PATHS=emulated.state=off (which turns emulated.decode, scores and pv off too),
advance uses the torch operations. `triton_reason` says where the emulated kernel's Triton
kernels may run at all.

Shapes: buffer f32 [rows, H, 512 + 16] (o then l_parts, contiguous); alpha f32 [rows, tiles, H];
p f32 [rows, tiles, H, 128] (any strides, keys contiguous); lane_sums: P [..., H, 128] -> psum
[..., H, 4, 4], lane (w, g) summing keys 32w + 16s + 4g + r in (s, r) order from 0; terms f64
[rows * tiles, 4 kk, 4 blocks, H, 128] (the PV MFMAs' products as the batched matmul writes
them); counts: the rows' tile counts in the group, non-increasing (a host list), and the same as
an int32 device tensor for the kernel.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable

import torch

from kernel import fastpath

LATENT = 512
L_PARTS = 16
FAST_PATH = "emulated.state"


LaneSums = Callable[[torch.Tensor], torch.Tensor]


def advance_torch(
    buffer: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor, terms: torch.Tensor, counts: list[int], lane_sums: LaneSums
) -> None:
    """The updates as torch operations (lane_sums, then six per tile), in place on `buffer`."""
    rows, heads = buffer.shape[0], buffer.shape[1]
    tiles = alpha.shape[1]
    psum = lane_sums(p)
    alpha_t = alpha.view(rows, tiles, heads, 1).unbind(1)
    psum_t = psum.view(rows, tiles, heads, L_PARTS).unbind(1)
    terms_t = terms.view(rows, tiles, 4, 4, heads, 128).permute(0, 1, 2, 4, 3, 5).unbind(1)  # [row, kk, H, b, 128]
    live = [sum(1 for c in counts if c > t) for t in range(tiles)]
    for t in range(tiles):
        n = live[t]
        if n == 0:
            break
        whole = n == rows
        both = buffer if whole else buffer[:n]
        torch.mul(both, alpha_t[t] if whole else alpha_t[t][:n], out=both)
        both[..., LATENT:].add_(psum_t[t] if whole else psum_t[t][:n])
        o = both[..., :LATENT].view(n, heads, 4, 128)
        tile_terms = (terms_t[t] if whole else terms_t[t][:n]).unbind(1)
        for kk in range(4):
            torch.add(o, tile_terms[kk], out=o)  # f64 sum rounded once to f32


@functools.cache
def _kernel(interpret: bool) -> Callable[..., object]:
    """The Triton kernel (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit
    def advance(buf_ptr, alpha_ptr, p_ptr, sp_row, sp_tile, sp_head, terms_ptr, counts_ptr, tiles, heads):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        row = pid // heads
        head = pid % heads
        e = tl.arange(0, 512)
        lane = tl.arange(0, 16)
        lane_key = (lane // 4) * 32 + (lane % 4) * 4  # lane (w, g) sums keys 32w + 16s + 4g + r
        state = buf_ptr + (row * heads + head).to(tl.int64) * 528
        o = tl.load(state + e)
        lp = tl.load(state + 512 + lane)
        n = tl.load(counts_ptr + row)
        # element e = 128 b + i of o reads terms[(row, t), kk, b, head, i]
        t_off = (e // 128) * heads * 128 + head * 128 + e % 128
        for t in range(0, n):
            rt = row * tiles + t
            a = tl.load(alpha_ptr + rt * heads + head)
            o = o * a
            lp = lp * a
            p_row = p_ptr + row.to(tl.int64) * sp_row + t * sp_tile + head * sp_head
            psum = tl.zeros([16], dtype=tl.float32)
            for k in tl.static_range(8):
                psum = psum + tl.load(p_row + lane_key + (k // 4) * 16 + k % 4)
            lp = lp + psum
            base = terms_ptr + rt.to(tl.int64) * (16 * heads * 128)
            for kk in tl.static_range(4):
                term = tl.load(base + kk * (4 * heads * 128) + t_off)
                o = (o.to(tl.float64) + term).to(tl.float32)
        tl.store(state + e, o)
        tl.store(state + 512 + lane, lp)

    return advance


def _on(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """The launch's device context (Triton launches on the current CUDA device)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def advance_triton(buffer: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor, terms: torch.Tensor, counts: torch.Tensor) -> None:
    """The updates by the Triton kernel, in place on `buffer` (counts: int32 device tensor)."""
    rows, heads = buffer.shape[0], buffer.shape[1]
    if not (buffer.is_contiguous() and alpha.is_contiguous() and terms.is_contiguous() and p.stride(-1) == 1):
        raise ValueError("advance_triton needs contiguous buffer, alpha and terms, and P's keys contiguous")
    kernel = _kernel(fastpath.interpreting())
    options = {} if fastpath.interpreting() else {"enable_fp_fusion": False, "num_warps": 4}
    with _on(buffer.device):
        strides = (p.stride(0), p.stride(1), p.stride(2))
        kernel[(rows * heads,)](buffer, alpha, p, *strides, terms, counts, alpha.shape[1], heads, **options)  # type: ignore[index]


def triton_reason(device: torch.device) -> str:
    """Why the emulated kernel's Triton kernels cannot run on `device` ("" when they can): they
    need Triton importable and a CUDA device, or Triton's interpreter on a CPU."""
    if not fastpath.have_triton():
        return "Triton is not installed"
    if device.type == "cuda" or (fastpath.interpreting() and device.type == "cpu"):
        return ""
    return "needs a CUDA device, or Triton's interpreter (TRITON_INTERPRET=1) on a CPU"


def eligible(device: torch.device, variant: str) -> str:
    """The fast path's eligibility (kernel.fastpath.FastPath.eligible): triton_reason."""
    return triton_reason(device)


# (rows, tiles, heads) of the probe's groups: ragged counts, and sizes of 1 (which Triton
# specialises into constants) and 16
PROBE_SHAPES = ((5, 7, 3), (2, 1, 1), (2, 1, 16), (2, 16, 2))


def probe_inputs(
    device: torch.device, rows: int = 5, tiles: int = 7, heads: int = 3
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """A group of rows x tiles x heads with values of every class the updates meet."""
    g = torch.Generator().manual_seed(29 + rows * 1000 + tiles * 10 + heads)
    special = torch.tensor([0.0, -0.0, 1e-45, -3e-42, 1.17e-38, 3.0e38, -3.4e38, float("inf"), float("-inf"), float("nan"), 1.0, -1.0])

    def draw(shape: tuple[int, ...], dtype: torch.dtype, scale: float) -> torch.Tensor:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
        x = x * torch.exp2(torch.randint(-40, 40, shape, generator=g).double())
        pick = torch.rand(shape, generator=g) < 0.1
        x = torch.where(pick, special[torch.randint(0, special.numel(), shape, generator=g)].double(), x)
        return x.to(dtype)

    buffer = draw((rows, heads, LATENT + L_PARTS), torch.float32, 1.0)
    alpha = draw((rows, tiles, heads), torch.float32, 1.0).abs().clamp_max(1.0)
    alpha[0, 0] = 0.0
    p = draw((rows, heads, tiles, 128), torch.float32, 1.0).abs().transpose(1, 2)  # the batched path's layout
    terms = draw((rows * tiles, 4, 4, heads, 128), torch.float64, 1.0)
    counts = sorted(torch.randint(0, tiles + 1, (rows,), generator=g).tolist(), reverse=True)
    counts[0] = tiles
    counts[-1] = 0 if rows > 2 else counts[-1]
    return buffer.to(device), alpha.to(device), p.to(device), terms.to(device), counts


def self_check(device: torch.device, lane_sums: LaneSums) -> bool:
    """Whether advance_triton gives advance_torch's bits on the probe's groups on `device`."""
    for shape in PROBE_SHAPES:
        buffer, alpha, p, terms, counts = probe_inputs(device, *shape)
        expected = buffer.clone()
        advance_torch(expected, alpha, p, terms, counts, lane_sums)
        got = buffer.clone()
        advance_triton(got, alpha, p, terms, torch.tensor(counts, dtype=torch.int32, device=device))
        if not fastpath.same_bits(expected, got):
            return False
    return True


def advance(
    buffer: torch.Tensor,
    alpha: torch.Tensor,
    p: torch.Tensor,
    terms: torch.Tensor,
    counts: list[int],
    counts_dev: torch.Tensor | None,
    lane_sums: LaneSums,
) -> None:
    """The group's updates, in place on `buffer`: the kernel where the fast path emulated.state
    gives it (counts_dev given), else torch."""
    if counts_dev is not None and fastpath.choose(FAST_PATH, buffer.device) is not None:
        try:
            advance_triton(buffer, alpha.contiguous(), p, terms, counts_dev)
            return
        except Exception as err:  # noqa: BLE001 - a shape the kernel does not compile for: torch (raised before the launch)
            warnings.warn(f"emulated: Triton state kernel failed ({type(err).__name__}: {err}); using torch", stacklevel=2)
    advance_torch(buffer, alpha, p, terms, counts, lane_sums)
