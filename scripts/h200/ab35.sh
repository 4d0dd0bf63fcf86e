#!/usr/bin/env bash
# Session 35's before / after of the bound's launched-op cuts on the H200 (one device call, ~400 s):
# the same emulated-alone campaign (scripts/h200/final_throughput.sh campaign S, $PROCS processes,
# default 15, nightly, no profile process) on the tree before (OLD, default 5ed2b40) and on HEAD,
# after one 20 s warm-up campaign (the emulator's CUDA kernels compiled and cached for both trees),
# results under "$RESULTS/ab/{old,new}".
set -u
S="${1:-150}"
OLD="${OLD:-5ed2b40}"
R="${RESULTS:-results}/ab"
mkdir -p "$R"
rm -rf /tmp/ab-old && git worktree add -f -q /tmp/ab-old "$OLD" && echo "old tree $(git -C /tmp/ab-old log --oneline -1)" | tee "$R/trees.txt"
echo "new tree $(git log --oneline -1)" | tee -a "$R/trees.txt"
timeout 90 python3 -m conformance fuzz --kernel emulated --seconds 20 --no-save > "$R/warmup.txt" 2>&1
for tree in new old; do
  dir=$PWD; [ "$tree" = old ] && dir=/tmp/ab-old
  ( cd "$dir" && RESULTS="$R/$tree" KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=0 PYTHONPATH="$dir:${PYTHONPATH:-}" \
      bash scripts/h200/final_throughput.sh campaign "$S" > "$R/$tree.log" 2>&1 )
  echo "== $tree"; tail -4 "$R/$tree.log"
done
