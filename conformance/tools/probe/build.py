"""Directed problems through the kernel contract: keys as exact values, rows as key lists, one call.

A `Key` is one fp8_ds_mla record given by its exact values: e4m3-representable latent code
values (512, float), four power-of-two block scales, and 64 bf16 rope values. A `Call` collects
rows (each a list of key ids into the call's records, duplicates allowed), one bf16 q per row
([H, 576]) and one softmax_scale, and runs a kernel through the contract (`run_call`): the
kernel sees only q, the records, indices and indptr. Everything is built on the CPU and moved
to the kernel's device; results come back as float64 on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from kernel.fp8 import decode_e4m3, encode_e4m3
from kernel.record import LATENT_DIM, RECORD_BYTES, ROPE_DIM, ROPE_OFFSET, SCALE_OFFSET

HEAD_DIM = LATENT_DIM + ROPE_DIM


@dataclass
class Key:
    """One record: latent code values (exact e4m3 values, float64 [512]), block scales (powers of
    two, float64 [4]) and rope values (bf16-exact, float64 [64]). K = [code * scale, rope]; V = code * scale."""

    codes: torch.Tensor = field(default_factory=lambda: torch.zeros(LATENT_DIM, dtype=torch.float64))
    scales: torch.Tensor = field(default_factory=lambda: torch.ones(4, dtype=torch.float64))
    rope: torch.Tensor = field(default_factory=lambda: torch.zeros(ROPE_DIM, dtype=torch.float64))

    def set_k(self, dim: int, code: float, scale: float | None = None) -> Key:
        """Set latent dim `dim` to code (an e4m3 value) and optionally its block's scale; rope dims
        (>= 512) take `code` as the bf16 rope value."""
        if dim >= LATENT_DIM:
            self.rope[dim - LATENT_DIM] = code
        else:
            self.codes[dim] = code
            if scale is not None:
                self.scales[dim // 128] = scale
        return self

    def latent(self) -> torch.Tensor:
        """V = K's latent values (float64 [512])."""
        return self.codes * self.scales.repeat_interleave(128)

    def k(self) -> torch.Tensor:
        """K (float64 [576])."""
        return torch.cat((self.latent(), self.rope))


def encode_keys(keys: Sequence[Key]) -> torch.Tensor:
    """uint8 [N, 656] records of the keys (codes must be e4m3-exact, rope bf16-exact: checked)."""
    n = len(keys)
    codes = torch.stack([k.codes for k in keys]).to(torch.float32) if n else torch.zeros(0, LATENT_DIM)
    enc = encode_e4m3(codes.contiguous(), saturate=False)
    back = decode_e4m3(enc)
    if not torch.equal(back, codes.to(torch.float64)):
        bad = torch.nonzero(back != codes.to(torch.float64))[0].tolist()
        raise ValueError(f"key {bad[0]} latent dim {bad[1]}: {float(codes[tuple(bad)])} is not an e4m3 value")
    rope = torch.stack([k.rope for k in keys]).to(torch.bfloat16) if n else torch.zeros(0, ROPE_DIM, dtype=torch.bfloat16)
    if n and not torch.equal(rope.to(torch.float64), torch.stack([k.rope for k in keys])):
        raise ValueError("a rope value is not bf16-exact")
    scales = torch.stack([k.scales for k in keys]).to(torch.float32) if n else torch.zeros(0, 4)
    rec = torch.zeros(n, RECORD_BYTES, dtype=torch.uint8)
    rec[:, :SCALE_OFFSET] = enc
    rec[:, SCALE_OFFSET:ROPE_OFFSET] = scales.contiguous().view(torch.uint8).reshape(n, 16)
    rec[:, ROPE_OFFSET:] = rope.contiguous().view(torch.uint8).reshape(n, 2 * ROPE_DIM)
    return rec


@dataclass
class Call:
    """Rows of one kernel call: keys (records), per row the key ids and q [H, 576] (float64, bf16-exact)."""

    heads: int
    softmax_scale: float
    keys: list[Key] = field(default_factory=list)
    rows: list[list[int]] = field(default_factory=list)
    qs: list[torch.Tensor] = field(default_factory=list)
    tags: list[object] = field(default_factory=list)

    def key(self, k: Key) -> int:
        """Add a record; its id."""
        self.keys.append(k)
        return len(self.keys) - 1

    def row(self, key_ids: Sequence[int], q: torch.Tensor, tag: object = None) -> int:
        """Add a query row attending to `key_ids` (in that order) with q [H, 576] or [576] (all heads)."""
        q = q.to(torch.float64)
        if q.dim() == 1:
            q = q.expand(self.heads, HEAD_DIM).clone()
        if not torch.equal(q.to(torch.bfloat16).to(torch.float64), q):
            raise ValueError("q is not bf16-exact")
        self.rows.append(list(key_ids))
        self.qs.append(q)
        self.tags.append(tag)
        return len(self.rows) - 1

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q bf16 [n_q, H, 576], kv_cache uint8 [N, 656], indices int32, indptr int32) on the CPU."""
        records = encode_keys(self.keys) if self.keys else torch.zeros(1, RECORD_BYTES, dtype=torch.uint8)
        q = torch.stack(self.qs).to(torch.bfloat16)
        flat = [i for r in self.rows for i in r]
        indices = torch.tensor(flat, dtype=torch.int32)
        lengths = torch.tensor([0] + [len(r) for r in self.rows], dtype=torch.int64)
        indptr = torch.cumsum(lengths, 0).to(torch.int32)
        return q, records, indices, indptr


class ProbeSkipped(RuntimeError):
    """The kernel does not take this probe's call (its reason is the message)."""


def run_call(kernel: Callable, call: Call, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one call through the contract: (out float64 [n_q, H, 512], lse float64 [n_q, H]) on the CPU.

    ProbeSkipped when the backend's `supports` refuses the call."""
    q, records, indices, indptr = call.tensors()
    q, records, indices, indptr = (t.to(device) for t in (q, records, indices, indptr))
    supports = getattr(kernel, "supports", None)
    if supports is not None:
        verdict = supports(q, records, indices, indptr, call.softmax_scale, return_lse=True)
        if not verdict:
            raise ProbeSkipped(verdict.reason)
    out, lse = kernel(q, records, indices, indptr, call.softmax_scale, return_lse=True)
    lse_t = torch.full(out.shape[:2], float("nan"), dtype=torch.float64) if lse is None else lse.detach().to("cpu", torch.float64)
    return out.detach().to("cpu", torch.float64), lse_t
