"""Probe what the sgl-flash-mla 1.0.0 kernels and torch SDPA do on this GPU (one-off facts for the adapters).

Prints one line per probe: which calls run on this device, lse units and empty-row conventions,
whether topk_length is honoured by the legacy SM90 decode, and whether mem-efficient SDPA takes
head dim 576 and returns lse. Run on the GPU: `python3 scripts/peers_probe.py`.
"""

from __future__ import annotations

import torch


def attempt(name, fn):
    try:
        res = fn()
        print(f"PROBE {name}: ok {res}")
        return res
    except Exception as err:  # noqa: BLE001
        msg = str(err).strip().splitlines()
        print(f"PROBE {name}: {type(err).__name__}: {' | '.join(msg[:3])[:400]}")
        return None


def main() -> None:
    import flash_mla as fm

    print("flash_mla", getattr(fm, "__version__", "?"), "has_legacy", fm.has_legacy(), torch.cuda.get_device_name(0), torch.__version__)
    dev = "cuda"
    torch.manual_seed(0)
    rows, topk, H = 4096, 128, 64
    # V32 records: latent codes small ints, pow2 scales, rope bf16
    from kernel.record import encode_records

    lat = torch.randn(rows, 512, device=dev)
    rope = torch.randn(rows, 64, device=dev).to(torch.bfloat16)
    cache = encode_records(lat, rope, "pow2")
    from kernel.record import decode_records

    dec = decode_records(cache)
    kbf = torch.cat((dec.latent, dec.rope), -1).to(torch.bfloat16)  # [rows, 576]
    q = torch.randn(2, 1, H, 576, device=dev).to(torch.bfloat16)
    idx = torch.randint(0, rows, (2, 1, topk), device=dev, dtype=torch.int32)
    scale = 576**-0.5

    def ref(qq, ii, n):
        out, lse = [], []
        for b in range(qq.shape[0]):
            k = kbf[ii[b, : n[b]].long()].double()
            s = qq[b].double() @ k.T * scale
            p = torch.softmax(s, -1)
            out.append(p @ k[:, :512])
            lse.append(torch.logsumexp(s, -1))
        return torch.stack(out), torch.stack(lse)

    k4 = cache.view(rows, 1, 1, 656)

    def legacy(topk_length=None, ii=idx, qq=q, bi=False):
        s = fm.get_mla_metadata()[0]
        return fm.flash_mla_with_kvcache(
            qq,
            k4,
            None,
            None,
            512,
            s,
            softmax_scale=scale,
            is_fp8_kvcache=True,
            indices=ii,
            topk_length=topk_length,
            use_legacy=True,
            kv_format="V32",
            enable_batch_invariant=bi,
        )

    o, l = legacy()
    r_o, r_l = ref(q[:, 0], idx[:, 0], [topk, topk])
    print(
        "PROBE legacy full: out err",
        float((o[:, 0].double() - r_o).abs().max()),
        "lse err",
        float((l.reshape(2, H) - r_l).abs().max()),
        "lse shape",
        tuple(l.shape),
    )
    tl = torch.tensor([100, 37], device=dev, dtype=torch.int32)

    def tl_probe():
        o, l = legacy(tl)
        r_o, r_l = ref(q[:, 0], idx[:, 0], [100, 37])
        return f"out err {float((o[:, 0].double() - r_o).abs().max()):.3g} lse err {float((l.reshape(2, H) - r_l).abs().max()):.3g}"

    attempt("legacy topk_length honoured", tl_probe)
    attempt(
        "legacy topk_length zero row",
        lambda: (lambda ol: (float(ol[0][1].abs().max()), ol[1].reshape(2, H)[1, :2].tolist()))(
            legacy(torch.tensor([100, 0], device=dev, dtype=torch.int32))
        ),
    )
    attempt("legacy enable_batch_invariant", lambda: legacy(bi=True)[0].shape)
    attempt(
        "current decode use_legacy=False V32",
        lambda: (
            fm.flash_mla_with_kvcache(
                q,
                k4,
                None,
                None,
                512,
                fm.get_mla_metadata()[0],
                softmax_scale=scale,
                is_fp8_kvcache=True,
                indices=idx,
                topk_length=tl,
                use_legacy=False,
                enable_batch_invariant=True,
            )[0].shape
        ),
    )
    k528 = torch.zeros(rows, 1, 1, 528, dtype=torch.uint8, device=dev)
    attempt(
        "current decode use_legacy=False V4.1 d512",
        lambda: (
            fm.flash_mla_with_kvcache(
                q[..., :512].contiguous(),
                k528,
                None,
                None,
                512,
                fm.get_mla_metadata()[0],
                softmax_scale=scale,
                is_fp8_kvcache=True,
                indices=idx,
                topk_length=tl,
                use_legacy=False,
                enable_batch_invariant=True,
            )[0].shape
        ),
    )
    # sparse prefill
    kv3 = kbf.view(rows, 1, 576)
    q3 = q[:, 0].contiguous()
    for legacy_flag in (True, False):

        def pf(legacy_flag=legacy_flag, ii=idx, tlen=None):
            out, mx, lse = fm.flash_mla_sparse_fwd(q3, kv3, ii, scale, 512, topk_length=tlen, use_legacy=legacy_flag)
            r_o, r_l = ref(q3, ii[:, 0], [ii.shape[-1]] * 2 if tlen is None else tlen.tolist())
            return (
                f"out err {float((out.double() - r_o).abs().max()):.3g} lse err {float((lse.double() - r_l).abs().max()):.3g} "
                f"lse shape {tuple(lse.shape)} dtype {lse.dtype}"
            )

        attempt(f"sparse prefill legacy={legacy_flag}", pf)
        attempt(f"sparse prefill legacy={legacy_flag} topk_length", lambda: pf(tlen=tl))

    def pf_empty():
        ii = idx.clone()
        ii[1] = -1
        out, mx, lse = fm.flash_mla_sparse_fwd(q3, kv3, ii, scale, 512, use_legacy=True)
        return f"empty row: out max {float(out[1].abs().max())} lse {lse[1, :2].tolist()} maxlogit {mx[1, :2].tolist()}"

    attempt("sparse prefill empty row", pf_empty)

    def pf_oob():
        ii = idx.clone()
        ii[0, 0, 5:] = rows + 7
        out, mx, lse = fm.flash_mla_sparse_fwd(q3, kv3, ii, scale, 512, use_legacy=True)
        r_o, r_l = ref(q3[:1], ii[:1, 0], [5])
        return f"index >= s_kv masked: out err {float((out[:1].double() - r_o).abs().max()):.3g}"

    attempt("sparse prefill index >= s_kv", pf_oob)
    for tk in (64, 96, 128, 32):
        attempt(
            f"sparse prefill topk={tk}",
            lambda tk=tk: (
                fm.flash_mla_sparse_fwd(q3, kv3, idx[..., :tk].contiguous() if tk <= 128 else idx, scale, 512, use_legacy=True)[0].shape
            ),
        )
    attempt("legacy decode topk=96", lambda: legacy(ii=idx[..., :96].contiguous())[0].shape)
    attempt("sparse prefill h=16", lambda: fm.flash_mla_sparse_fwd(q3[:, :16].contiguous(), kv3, idx, scale, 512, use_legacy=True)[0].shape)
    attempt("sparse prefill h=128", lambda: fm.flash_mla_sparse_fwd(torch.cat((q3, q3), 1), kv3, idx, scale, 512, use_legacy=True)[0].shape)
    attempt(
        "sparse prefill negative scale",
        lambda: fm.flash_mla_sparse_fwd(q3, kv3, idx, -scale, 512, use_legacy=True)[0].float().abs().max().item(),
    )

    # SDPA mem-efficient with head dim 576, MQA as query positions
    def sdpa():
        B, W = 2, 128
        qq = q3[:, :16].unsqueeze(1)  # [B, 1, 16, 576]
        k = kbf[idx[:, 0].long()].unsqueeze(1)  # [B,1,W,576]
        v = k[..., :512]
        bias = torch.zeros(B, 1, 16, W, device=dev, dtype=torch.bfloat16)
        bias[1, :, :, 37:] = float("-inf")
        res = torch.ops.aten._scaled_dot_product_efficient_attention(qq, k, v, bias, True, 0.0, False, scale=scale)
        o, l = res[0], res[1]
        r_o, r_l = ref(q3[:, :16], idx[:, 0], [128, 37])
        return (
            f"out err {float((o[:, 0].double() - r_o).abs().max()):.3g} "
            f"lse err {float((l[:, 0, :16].double() - r_l).abs().max()):.3g} lse shape {tuple(l.shape)}"
        )

    attempt("sdpa efficient head dim 576 + lse", sdpa)

    def sdpa_empty():
        k = kbf[idx[:, 0].long()].unsqueeze(1)
        bias = torch.full((2, 1, 16, 128), float("-inf"), device=dev, dtype=torch.bfloat16)
        res = torch.ops.aten._scaled_dot_product_efficient_attention(
            q3[:, :16].unsqueeze(1), k, k[..., :512], bias, True, 0.0, False, scale=scale
        )
        return f"all masked: out {float(res[0].float().abs().max())} nan {bool(res[0].isnan().any())} lse {res[1][0, 0, :2].tolist()}"

    attempt("sdpa efficient all masked", sdpa_empty)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):

        def pub(b=b):
            k = kbf[idx[:, 0].long()].unsqueeze(1)
            with sdpa_kernel([b]):
                return torch.nn.functional.scaled_dot_product_attention(q3[:, :16].unsqueeze(1), k, k[..., :512], scale=scale).shape

        attempt(f"sdpa public {b.name} 576/512", pub)


if __name__ == "__main__":
    main()
