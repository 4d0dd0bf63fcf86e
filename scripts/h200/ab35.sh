#!/usr/bin/env bash
# Session 35's before / after of the bound's launched-op cuts on the H200 (one device call, ~400 s):
# the same emulated-alone campaign (scripts/h200/final_throughput.sh campaign S, $PROCS processes,
# default 15, no profile process) on the tree before (OLD, default 5ed2b40) and on HEAD,
# after one 20 s warm-up campaign (the emulator's CUDA kernels compiled and cached for both trees),
# results under "$RESULTS/ab/{old,new}". HYP=nightly (the default of session 35's run) draws other
# examples in every run (on the 2-core CPU two 150-s runs of one tree differed by 20%); HYP=ci
# (derandomized: seeds 0, 1, 2, ... in every process) gives both trees the same examples, so that
# the rates compare the code alone (on the CPU: 19.01 / 18.59 vs 18.77 / 18.64 examples/s).
# Every other variable of final_throughput.sh (MPS=1, ...) goes through to both campaigns.
set -u
S="${1:-150}"
OLD="${OLD:-5ed2b40}"
R="${RESULTS:-results}/ab"
mkdir -p "$R"; R=$(cd "$R" && pwd)  # absolute: the old tree runs from its own folder
rm -rf /tmp/ab-old && git worktree add -f -q /tmp/ab-old "$OLD" && echo "old tree $(git -C /tmp/ab-old log --oneline -1)" | tee "$R/trees.txt"
echo "new tree $(git log --oneline -1)" | tee -a "$R/trees.txt"
timeout 90 python3 -m conformance fuzz --kernel emulated --seconds 20 --no-save > "$R/warmup.txt" 2>&1
for tree in new old; do
  dir=$PWD; [ "$tree" = old ] && dir=/tmp/ab-old
  ( cd "$dir" && RESULTS="$R/$tree" KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=0 PYTHONPATH="$dir:${PYTHONPATH:-}" \
      FUZZ_ARGS="--hypothesis-profile ${HYP:-nightly}" \
      bash scripts/h200/final_throughput.sh campaign "$S" > "$R/$tree.log" 2>&1 )
  echo "== $tree"; tail -4 "$R/$tree.log"
done
