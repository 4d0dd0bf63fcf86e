#!/usr/bin/env bash
# Lead's exploration on the H200 (issue 19): the suite against both FlashMLA kernels and torch-sdpa
# under the rewritten profiles, the two FlashMLA corpus entries replayed, and the SASS of PyTorch's
# mem-efficient attention forward read for flush-to-zero (its profile's `subnormals`).
set -u
R="$RESULTS/lead"; mkdir -p "$R"
for k in flashmla flashmla-prefill torch-sdpa; do
  ( CI=1 timeout 240 python3 -m pytest conformance --kernel "$k" -n 3 -q -rfE -p no:cacheprovider > "$R/suite-$k.log" 2>&1; echo "rc=$?" >> "$R/suite-$k.log" ) &
done
for e in flashmla-decode-max-latent-one-hot:flashmla flashmla-max-latent-flat-softmax:flashmla-prefill flashmla-max-latent-flat-softmax:flashmla; do
  timeout 60 python3 -m conformance replay "conformance/corpus/${e%%:*}.json" --kernel "${e##*:}" > "$R/replay-${e%%:*}-${e##*:}.txt" 2>&1
  echo "rc=$?" >> "$R/replay-${e%%:*}-${e##*:}.txt"
done
# PyTorch mem-efficient attention SASS: which f32 instructions carry .FTZ
lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
mkdir -p /tmp/elf && cd /tmp/elf || exit 0
timeout 120 cuobjdump -lelf "$lib" > "$R/elf-list.txt" 2>&1
grep -i "sm_90" "$R/elf-list.txt" | head -3 >> "$R/sass-summary.txt"
timeout 150 cuobjdump -xelf all "$lib" > /dev/null 2>&1
ls | wc -l >> "$R/sass-summary.txt"
for f in $(grep -l "fmha_cutlassF_bf16_aligned" *sm_90* *sm_80* 2>/dev/null | head -4); do
  echo "=== $f" >> "$R/sass-summary.txt"
  timeout 60 cuobjdump -sass "$f" > "/tmp/sass-$f.txt" 2>&1
  grep -m 40 -E "FTZ|MUFU" "/tmp/sass-$f.txt" > "$R/sass-excerpt-$f.txt"
  python3 - "/tmp/sass-$f.txt" >> "$R/sass-summary.txt" <<'PY'
import re, sys, collections
text = open(sys.argv[1]).read()
funcs = re.split(r"\n\s*Function : ", text)
for body in funcs[1:]:
    name = body.split("\n", 1)[0]
    if "cutlassF_bf16_aligned" not in name:
        continue
    ops = collections.Counter(re.findall(r"\b(F(?:ADD|MUL|FMA|MNMX|SETP|SEL)|MUFU\.[A-Z0-9]+)(\.[A-Z0-9.]+)?", body))
    ftz = sum(n for (op, mod), n in ops.items() if "FTZ" in mod)
    total = sum(ops.values())
    print(name[:120], "f32 ops:", total, "with .FTZ:", ftz, "mufu:", {f"{o}{m}": n for (o, m), n in ops.items() if o.startswith("MUFU")})
PY
done
cd - > /dev/null
rm -rf /tmp/elf
rm -f /tmp/sass-*.txt
true
