#!/usr/bin/env bash
# H200 session for issue 11 (run from the repo root on the device machine; writes under $OUT):
# err/bound distributions of emulated and FlashMLA against their profiles (after; and before, when
# a tree of the old oracle is in .before_tree/), then the gfx950 sequential-RTZ correct variant
# through the whole suite on CUDA. Needs the sgl-flash-mla wheel in .whl/.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
N=${N:-300}; ROW=${ROW:-2048}
S=scripts/err_bound_distribution.py
for k in emulated flashmla; do
  echo "=== after $k ($(date +%T))"
  timeout 150 python3 $S --kernel $k --device cuda --problems $N --max-row $ROW --shares 5 --json "$OUT/after_$k.json" > "$OUT/after_$k.log" 2>&1; echo "rc=$?"
  if [ -d .before_tree ]; then
    echo "=== before $k ($(date +%T))"
    (cd .before_tree && timeout 150 python3 err_bound_distribution.py --kernel $k --device cuda --problems $N --max-row $ROW --shares 5 --json "$OUT/before_$k.json" > "$OUT/before_$k.log" 2>&1; echo "rc=$?")
  fi
done
echo "=== suite: gfx950_sequential_rtz on cuda, ${PROFILE:-ci} profile ($(date +%T))"
timeout ${SUITE_S:-200} python3 -m pytest conformance --kernel conformance.mutation.catalogue:gfx950_sequential_rtz --device cuda \
  --hypothesis-profile ${PROFILE:-ci} -q -p no:cacheprovider -n 4 > "$OUT/rtz_suite.log" 2>&1
echo "rc=$?"; tail -5 "$OUT/rtz_suite.log"
