#!/usr/bin/env bash
# Session 36's second H200 call (~400 s): materialize's bits on CUDA against the CPU's recorded
# hashes (scripts/materialize_snapshot.py --check --device cuda), then the emulated-alone campaign
# under MPS (15 processes, HYP=ci: the same examples for both trees) on OLD (default e74c292, before
# this session's materialise cuts) and on HEAD, S s each (default 90), then HEAD under the nightly
# profile for NIGHTLY_S s (default 150; 0: none), all under "$RESULTS/s36b".
set -u
S="${1:-90}"; NIGHTLY_S="${NIGHTLY_S:-150}"; OLD="${OLD:-e74c292}"
R="${RESULTS:-results}/s36b"; mkdir -p "$R"; R=$(cd "$R" && pwd)  # absolute: the old tree runs from its own folder
timeout 150 python3 scripts/materialize_snapshot.py --check tests/data/materialize_hashes.json --device cuda > "$R/snapshot.txt" 2>&1
echo "snapshot rc=$? $(tail -1 "$R/snapshot.txt")"
rm -rf /tmp/ab-old && git worktree add -f -q /tmp/ab-old "$OLD" && echo "old tree $(git -C /tmp/ab-old log --oneline -1)" | tee "$R/trees.txt"
echo "new tree $(git log --oneline -1)" | tee -a "$R/trees.txt"
timeout 90 python3 -m conformance fuzz --kernel emulated --seconds 15 --no-save > "$R/warmup.txt" 2>&1
for tree in new old; do
  dir=$PWD; [ "$tree" = old ] && dir=/tmp/ab-old
  ( cd "$dir" && RESULTS="$R/$tree" KERNELS=emulated PROCS=15 PROFILE=0 MPS=1 PYTHONPATH="$dir:${PYTHONPATH:-}" \
      FUZZ_ARGS="--hypothesis-profile ci" bash scripts/h200/final_throughput.sh campaign "$S" > "$R/$tree.log" 2>&1 )
  echo "== $tree (ci, MPS)"; grep -h '^MPS' "$R/$tree/throughput/campaign-env.txt"; tail -3 "$R/$tree.log"
done
[ "$NIGHTLY_S" -gt 0 ] || exit 0
RESULTS="$R/nightly" KERNELS=emulated PROCS=15 PROFILE=0 MPS=1 bash scripts/h200/final_throughput.sh campaign "$NIGHTLY_S" > "$R/nightly.log" 2>&1
echo "== new (nightly, MPS, ${NIGHTLY_S} s)"; grep -h '^MPS' "$R/nightly/throughput/campaign-env.txt"; tail -3 "$R/nightly.log"
