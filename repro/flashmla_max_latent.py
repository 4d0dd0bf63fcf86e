"""Reproducer: FlashMLA (sgl-flash-mla 1.0.0, SM90 legacy kernels) on records whose latent reaches
the fp8_ds_mla cap (|latent| = 448 * 2^7 = 57344, scale 2^7), compared with a float64 softmax.

Builds the inputs of a corpus entry with the project's recipe materialiser (bit-identical on any
device), calls FlashMLA's kernel *directly* (no adapter: `flash_mla_with_kvcache(use_legacy=True,
kv_format="V32")` for the sparse decode, `flash_mla_sparse_fwd(use_legacy=True)` over the exactly
dequantised bf16 KV for the sparse prefill) and prints, for the worst output element: FlashMLA's
value, the float64 value, the row's largest |V| in that dim and its largest |score|, and whether
FlashMLA's value lies outside [min V, max V] of the row's keys in that dim by more than 2^-7 max|V|
(a softmax output never does, whatever its rounding; bf16 P moves it by at most ~2^-8).

Usage (an SM90 GPU with sgl-flash-mla 1.0.0, the project installed; from the repository root):
    python repro/flashmla_max_latent.py conformance/corpus/flashmla-decode-max-latent-one-hot.json decode
    python repro/flashmla_max_latent.py conformance/corpus/flashmla-max-latent-flat-softmax.json prefill
"""

from __future__ import annotations

import json
import sys

import torch

from kernel.record import decode_records
from strategies.materialize import materialize
from strategies.recipe import Recipe


def float64_reference(q: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """out f64 [n_q, H, 512] and scores f64 [n_q, H, W] of q [n_q, H, 576] over keys [n_q, W, 576]."""
    s = torch.einsum("qhd,qkd->qhk", q.double(), keys) * scale
    s = s.masked_fill(~valid.unsqueeze(1), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("qhk,qkd->qhd", p, keys[..., :512]), s


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[2] not in ("decode", "prefill"):
        print("usage: python repro/flashmla_max_latent.py ENTRY.json decode|prefill", file=sys.stderr)
        return 2
    path, kind = sys.argv[1], sys.argv[2]
    import flash_mla

    recipe = Recipe.from_json_dict(json.load(open(path, encoding="utf-8"))["recipe"])
    prob = materialize(recipe, "cuda")
    n_q, heads, _ = prob.q.shape
    ptr = prob.indptr.tolist()
    lengths = [max(ptr[i + 1] - ptr[i], 0) for i in range(n_q)]
    width = max(128, -(-max(lengths) // 128) * 128)
    idx = torch.full((n_q, width), -1, dtype=torch.int32, device="cuda")
    for i, n in enumerate(lengths):
        idx[i, :n] = prob.indices[ptr[i] : ptr[i] + n]
    valid = idx >= 0
    flat = prob.kv_cache.view(-1, 656)
    dec = decode_records(flat)
    kv64 = torch.cat((dec.latent, dec.rope), dim=-1)  # exact
    keys = torch.where(valid.unsqueeze(-1), kv64[idx.clamp_min(0).long()], 0.0)
    scale = float(prob.softmax_scale)
    q64 = torch.zeros(n_q, 64, 576, dtype=torch.bfloat16, device="cuda")
    q64[:, :heads] = prob.q
    if kind == "decode":
        sched = flash_mla.get_mla_metadata()[0]
        out, _lse = flash_mla.flash_mla_with_kvcache(
            q64.unsqueeze(1),
            flat.view(-1, 1, 1, 656),
            None,
            None,
            512,
            sched,
            softmax_scale=scale,
            is_fp8_kvcache=True,
            indices=idx.unsqueeze(1),
            use_legacy=True,
            kv_format="V32",
        )
        out = out[:, 0]
    else:
        kv_bf16 = kv64.to(torch.bfloat16)
        assert torch.equal(kv_bf16.double(), kv64), "dequantised KV not exact in bf16"
        out, _max_logits, _lse = flash_mla.flash_mla_sparse_fwd(q64, kv_bf16.unsqueeze(1), idx.unsqueeze(1), scale, 512, use_legacy=True)
    out = out[:, :heads].double()
    ref, scores = float64_reference(prob.q, keys, valid, scale)
    err = (out - ref).abs()
    r, h, d = (int(x) for x in torch.nonzero(err == err.max())[0])
    v = keys[r, : lengths[r], d]
    vmax = float(keys[r, : lengths[r], :512].abs().max())
    outside = float(out[r, h, d]) > float(v.max()) + 2**-7 * vmax or float(out[r, h, d]) < float(v.min()) - 2**-7 * vmax
    print(f"{kind}: n_q {n_q}, H {heads}, row {r} has {lengths[r]} keys, softmax_scale {scale:.6g}")
    print(
        f"worst element (row {r}, head {h}, dim {d}): flashmla {float(out[r, h, d]):.6g}, "
        f"float64 {float(ref[r, h, d]):.6g}, |err| {float(err.max()):.6g}"
    )
    print(
        f"row {r} dim {d}: V in [{float(v.min()):.6g}, {float(v.max()):.6g}]; row max |V| {vmax:.6g}; "
        f"max |score| {float(scores[r, h, : lengths[r]].abs().max()):.6g}"
    )
    print(
        f"median |err| over the call {float(err.median()):.3g}; "
        f"elements with |err| > 2^-6 max|V|: {int((err > 2**-6 * vmax).sum())} of {err.numel()}"
    )
    print("outside the convex hull of the row's V (beyond 2^-7 max|V|):", outside)
    return 0


if __name__ == "__main__":
    sys.exit(main())
