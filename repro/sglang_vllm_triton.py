"""Reproducer: sglang's and vLLM's Triton MLA kernels called directly (no adapter) on the inputs of a
corpus entry, against a float64 softmax.

Builds the entry's inputs with the project's recipe materialiser (bit-identical on any device),
decodes every record the rows use exactly (float64; bf16 holds it for power-of-two scales), and
calls the engine's own entry point on a bf16 key table of the rows' keys, as the engine would:
- sglang-decode: sglang 0.5.10.post1 `decode_attention_fwd` (grouped MLA kernel, page size 1,
  CSR kv_indptr / kv_indices, 8 KV splits; H = 1 run as 2 heads);
- vllm-decode: vLLM 0.33.0 `decode_attention_fwd(..., is_mla=True)` (block table of the rows'
  keys, seq_lens, vLLM's split rule from the longest row);
- vllm-sparse: vLLM 0.33.0 `triton_bf16_mla_sparse_interface` (indices padded with -1 to 16).
Prints the worst output element (kernel, float64, |err|), the row's V range in that dim (a
softmax output never leaves [min V, max V] by more than the rounding of its weights), the worst
lse error where the kernel returns lse, and non-finite counts.

Usage (CUDA with Triton; sglang's wheel / vLLM's Python files on PYTHONPATH; the project installed):
    python repro/sglang_vllm_triton.py ENTRY.json sglang-decode|vllm-decode|vllm-sparse
"""

from __future__ import annotations

import json
import sys

import torch

from kernel.record import decode_records
from strategies.materialize import materialize
from strategies.recipe import Recipe


def rows_of(prob) -> tuple[list[torch.Tensor], list[torch.Tensor]]:  # type: ignore[no-untyped-def]
    """Each row's valid entries (negative entries masked when has_invalid) and their exact
    float64 keys [n, 576] (only the records a row consumes are decoded)."""
    ptr = prob.indptr.tolist()
    flat = prob.kv_cache.view(-1, 656)
    entries, keys = [], []
    for i in range(prob.q.shape[0]):
        e = prob.indices[ptr[i] : ptr[i] + max(ptr[i + 1] - ptr[i], 0)].long()
        e = e[e >= 0] if prob.has_invalid else e
        dec = decode_records(flat[e])
        entries.append(e)
        keys.append(torch.cat((dec.latent, dec.rope), dim=-1))
    return entries, keys


def main() -> int:
    path, name = sys.argv[1], sys.argv[2]
    from kernel.engines import load_sglang, load_vllm

    recipe = Recipe.from_json_dict(json.load(open(path, encoding="utf-8"))["recipe"])
    prob = materialize(recipe, "cuda")
    n_q, heads, _ = prob.q.shape
    scale = float(prob.softmax_scale)
    entries, row_keys = rows_of(prob)
    lengths = [e.numel() for e in entries]
    width = max(16, -(-max(lengths + [1]) // 16) * 16)
    # one key table: row q's keys at q * width + j (the engines' bf16 workspace of gathered keys)
    table64 = torch.zeros(n_q * width, 576, dtype=torch.float64, device="cuda")
    for q, e in enumerate(entries):
        table64[q * width : q * width + e.numel()] = row_keys[q]
    table = table64.to(torch.bfloat16)
    assert torch.equal(table.double(), table64), "keys not exact in bf16 (a non-power-of-two scale)"
    run_heads = max(heads, 2) if name != "vllm-sparse" else heads
    q = torch.zeros(n_q, run_heads, 576, dtype=torch.bfloat16, device="cuda")
    q[:, :heads] = prob.q
    lse = None
    if name == "sglang-decode":
        kernel = load_sglang("sglang.srt.layers.attention.triton_ops.decode_attention", name)[0]
        kv_indptr = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        kv_indices = torch.cat(
            [torch.arange(n, dtype=torch.int32) + i * width for i, n in enumerate(lengths)] + [torch.zeros(0, dtype=torch.int32)]
        )
        o = torch.empty(n_q, run_heads, 512, dtype=torch.bfloat16, device="cuda")
        logits = torch.empty(n_q, run_heads, 8, 512, dtype=torch.float32, device="cuda")
        att_lse = torch.empty(n_q, run_heads, 8, dtype=torch.float32, device="cuda")
        splits = torch.full((n_q,), 8, dtype=torch.int32, device="cuda")
        k = table.view(-1, 1, 576)
        kernel.decode_attention_fwd(q, k, k[..., :512], o, kv_indptr, kv_indices.cuda(), logits, att_lse, splits, 8, scale, 1.0, 1.0)
    elif name == "vllm-decode":
        kernel = load_vllm("vllm.v1.attention.ops.triton_decode_attention", name)[0]
        block_table = (torch.arange(width, dtype=torch.int32) + torch.arange(n_q, dtype=torch.int32)[:, None] * width).cuda()
        seq = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        splits = min(1 << (max(1, max(lengths + [1]) // 512) - 1).bit_length(), 2 * sms)
        o = torch.zeros(n_q, run_heads, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.zeros(n_q, run_heads, dtype=torch.float32, device="cuda")
        logits = torch.empty(n_q, run_heads, splits, 513, dtype=torch.float32, device="cuda")
        cache = table.view(-1, 1, 1, 576)
        one = torch.ones((), dtype=torch.float32, device="cuda")
        kernel.decode_attention_fwd(
            q, cache, cache[..., :512], o, lse, block_table, seq, logits, splits, scale, 1, k_scale=one, v_scale=one, is_mla=True
        )
    else:
        kernel = load_vllm("vllm.v1.attention.ops.xpu_mla_sparse", name)[0]
        idx = torch.full((n_q, 1, width), -1, dtype=torch.int32)
        for i, n in enumerate(lengths):
            idx[i, 0, :n] = torch.arange(n, dtype=torch.int32) + i * width
        o, _, lse = kernel.triton_bf16_mla_sparse_interface(q, table.view(-1, 1, 576), idx.cuda(), scale)
    torch.cuda.synchronize()
    out = o[:, :heads].double()
    worst = (0.0, None)
    lse_err = 0.0
    for i, e in enumerate(entries):
        if not e.numel():
            continue
        keys = row_keys[i]
        s = (prob.q[i].double() @ keys.T) * scale
        ref_lse = torch.logsumexp(s, dim=-1)
        ref = torch.exp(s - ref_lse[:, None]) @ keys[:, :512]
        err = (out[i] - ref).abs().nan_to_num(float("inf"))
        h, d = divmod(int(err.argmax()), 512)
        if float(err[h, d]) > worst[0] or worst[1] is None:
            lo, hi = float(keys[:, d].min()), float(keys[:, d].max())
            worst = (float(err[h, d]), (i, h, d, float(out[i, h, d]), float(ref[h, d]), lo, hi, float(s.abs().max())))
        if lse is not None:
            lse_err = max(lse_err, float((lse[i, :heads].double() - ref_lse).abs().max()))
    print(f"{name} on {path}: {n_q} rows, {heads} heads, row lengths {min(lengths + [0])}..{max(lengths + [0])}, scale {scale:.6g}")
    print(f"non-finite outputs: {int((~torch.isfinite(out)).sum())}")
    if worst[1] is not None:
        i, h, d, got, want, lo, hi, smax = worst[1]
        span = max(abs(lo), abs(hi))
        outside = got < lo - 2**-7 * span or got > hi + 2**-7 * span
        print(f"worst element (row {i}, head {h}, dim {d}): kernel {got:.9g}, float64 {want:.9g}, |err| {worst[0]:.6g}")
        print(f"row's V in that dim: [{lo:.6g}, {hi:.6g}] (outside by more than 2^-7 max|V|: {outside}); max |score| {smax:.6g}")
    if lse is not None:
        print(f"max |lse err| over rows with keys: {lse_err:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
