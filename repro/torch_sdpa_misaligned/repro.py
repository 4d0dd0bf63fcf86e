"""Standalone reproducer: PyTorch's memory-efficient SDPA kernel on a query whose data pointer is
not 16-byte aligned (a legal strided view: a one-row slice of a padded bf16 tensor).

No project code is imported. The tensors are built directly with torch.as_strided from a layout
(shape, strides, storage offset in elements; every allocation of PyTorch's CUDA caching allocator
is 512-byte aligned, so the storage offset fixes data_ptr % 16):

    python repro/torch_sdpa_misaligned/repro.py --api public  --q-offset 4      # one case
    python repro/torch_sdpa_misaligned/repro.py --api private --from-dump calls.jsonl
    python repro/torch_sdpa_misaligned/repro.py --sweep                          # 0..7 x both APIs

--api public : torch.nn.functional.scaled_dot_product_attention under
               torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)
--api private: torch.ops.aten._scaled_dot_product_efficient_attention (what the adapter calls)

Default layout (the suite's failing case: one query row of H = 1 head taken from a padded q):
q [1, 1, H, 576] bf16 at storage offset --q-offset (elements) of a fresh buffer; K [1, 1, W, 576]
bf16 contiguous, V = K[..., :512] (a view), additive bias [1, 1, H, W] bf16 zeros. --from-dump
takes the layouts of q / key / bias from a JSON line written by dump_plugin.py (this folder)
(default: the last line whose q is not 16-byte aligned, else the last line).

Each case prints one line and exits: 0 ok (output within 2e-2 relative of a float32 reference),
1 the call raised a clean error (the API refused the input), 2 wrong output, 3 CUDA error (the
process's CUDA context is dead: a fault such as "misaligned address"), 4 no CUDA device.
--sweep runs each case in its own process (a fault kills only that process) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

EXIT_OK, EXIT_RAISED, EXIT_WRONG, EXIT_CUDA, EXIT_NO_DEVICE = 0, 1, 2, 3, 4
HEAD_DIM, V_DIM = 576, 512


def strided(shape: list[int], stride: list[int], offset: int, dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    """A tensor of this layout in a fresh buffer (random normal values; NaN-free)."""
    span = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True) if n > 0)
    buf = torch.randn(offset + span, generator=gen, device=device).to(dtype)
    return buf.as_strided(shape, stride, offset)


def layouts(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The q / key / bias layouts of the case (from --from-dump or the default one)."""
    if args.from_dump:
        lines = [json.loads(x) for x in Path(args.from_dump).read_text().splitlines() if x.strip()]
        if not lines:
            raise SystemExit(f"{args.from_dump}: no calls logged")
        bad = [x for x in lines if x["q"]["ptr_mod16"] or x["key"]["ptr_mod16"] or x["bias"]["ptr_mod16"]]
        chosen = (bad or lines)[-1]
        return {k: chosen[k] for k in ("q", "key", "bias")} | {"scale": chosen.get("scale", HEAD_DIM**-0.5)}
    h, w, b = args.heads, args.keys, args.batch
    return {
        "q": {"shape": [b, 1, h, HEAD_DIM], "stride": [h * HEAD_DIM, h * HEAD_DIM, HEAD_DIM, 1], "storage_offset": args.q_offset},
        "key": {"shape": [b, 1, w, HEAD_DIM], "stride": [w * HEAD_DIM, w * HEAD_DIM, HEAD_DIM, 1], "storage_offset": 0},
        "bias": {"shape": [b, 1, h, w], "stride": [h * w, h * w, w, 1], "storage_offset": 0},
        "scale": HEAD_DIM**-0.5,
    }


def run_case(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: the memory-efficient SDPA kernel runs on CUDA only")
        return EXIT_NO_DEVICE
    lay = layouts(args)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = strided(lay["q"]["shape"], lay["q"]["stride"], lay["q"]["storage_offset"], torch.bfloat16, "cuda", gen)
    k = strided(lay["key"]["shape"], lay["key"]["stride"], lay["key"]["storage_offset"], torch.bfloat16, "cuda", gen)
    v = k[..., :V_DIM]
    bias = strided(lay["bias"]["shape"], lay["bias"]["stride"], lay["bias"]["storage_offset"], torch.bfloat16, "cuda", gen).zero_()
    scale = float(lay["scale"])
    facts = (
        f"q {list(q.shape)} stride {list(q.stride())} offset {q.storage_offset()} ptr%16 {q.data_ptr() % 16} "
        f"contiguous {q.is_contiguous()}; K {list(k.shape)} ptr%16 {k.data_ptr() % 16}; V = K[..., :512]; "
        f"bias {list(bias.shape)} ptr%16 {bias.data_ptr() % 16}; torch {torch.__version__} on {torch.cuda.get_device_name()}"
    )
    try:
        if args.api == "public":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
        else:
            out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False, scale=scale)[0]
        torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001 - a refusal (RuntimeError, ValueError) or a CUDA fault (AcceleratorError)
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        cuda = "CUDA error" in str(err) or "cudaError" in str(err)
        print(f"{args.api:<7} {'CUDA-ERROR' if cuda else 'RAISED':<10} {text[:200]} | {facts}")
        return EXIT_CUDA if cuda else EXIT_RAISED
    ref = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * scale + bias.float(), dim=-1) @ v.float()
    err = float((out.float() - ref).norm() / ref.norm())
    ok = err < 2e-2
    print(f"{args.api:<7} {'OK' if ok else 'WRONG':<10} rel err {err:.3g} | {facts}")
    return EXIT_OK if ok else EXIT_WRONG


def sweep(args: argparse.Namespace) -> int:
    """Every q offset 0..7 elements (data_ptr % 16 = 0, 2, ..., 14) x both APIs, one process each
    (--jobs at a time)."""
    cases = [(offset, api) for offset in range(8) for api in ("public", "private")]
    names = {EXIT_OK: "ok", EXIT_RAISED: "raised", EXIT_WRONG: "wrong", EXIT_CUDA: "CUDA error", EXIT_NO_DEVICE: "no device"}
    print(f"{'q offset (elems)':>16} {'ptr % 16':>8} {'api':<8} {'outcome':<11} detail", flush=True)
    worst = 0
    for begin in range(0, len(cases), args.jobs):
        procs = []
        for offset, api in cases[begin : begin + args.jobs]:
            cmd = [sys.executable, __file__, "--api", api, "--q-offset", str(offset), "--heads", str(args.heads), "--keys", str(args.keys)]
            procs.append((offset, api, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for offset, api, proc in procs:
            try:
                stdout, stderr = proc.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
                print(f"{offset:>16} {2 * offset:>8} {api:<8} {'timeout':<11}", flush=True)
                worst = max(worst, EXIT_CUDA)
                continue
            line = (stdout.strip().splitlines() or stderr.strip().splitlines()[-1:] or [""])[-1]
            detail = line.split("|")[0].split(None, 2)[-1] if "|" in line else line[:200]
            print(f"{offset:>16} {2 * offset:>8} {api:<8} {names.get(proc.returncode, f'rc {proc.returncode}'):<11} {detail}", flush=True)
            worst = max(worst, proc.returncode if proc.returncode in names else EXIT_CUDA)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", choices=("public", "private"), default="public")
    parser.add_argument("--q-offset", type=int, default=4, help="q's storage offset in elements (4 -> data_ptr %% 16 == 8)")
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--from-dump", default=None, help="JSON lines written by dump_plugin.py (this folder)")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--jobs", type=int, default=8, help="processes at a time in --sweep")
    args = parser.parse_args(argv)
    return sweep(args) if args.sweep else run_case(args)


if __name__ == "__main__":
    sys.exit(main())
