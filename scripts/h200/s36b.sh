#!/usr/bin/env bash
# Session 36's second H200 call (~400 s): materialize's bits on CUDA against the CPU's recorded
# hashes (scripts/materialize_snapshot.py --check --device cuda), then scripts/h200/ab35.sh under
# MPS with HYP=ci (the same examples for both trees) on OLD (default e74c292, before this
# session's materialise cuts) and on HEAD, S s each (default 90), then HEAD under the nightly
# profile and MPS for NIGHTLY_S s (default 150; 0: none), all under "$RESULTS/s36b".
set -u
S="${1:-90}"; NIGHTLY_S="${NIGHTLY_S:-150}"
R="${RESULTS:-results}/s36b"; mkdir -p "$R"
timeout 150 python3 scripts/materialize_snapshot.py --check tests/data/materialize_hashes.json --device cuda > "$R/snapshot.txt" 2>&1
echo "snapshot rc=$? $(tail -1 "$R/snapshot.txt")"
RESULTS="$R" OLD="${OLD:-e74c292}" HYP=ci MPS=1 PROCS=15 bash scripts/h200/ab35.sh "$S"
[ "$NIGHTLY_S" -gt 0 ] || exit 0
RESULTS="$R/nightly" KERNELS=emulated PROCS=15 PROFILE=0 MPS=1 bash scripts/h200/final_throughput.sh campaign "$NIGHTLY_S" > "$R/nightly.log" 2>&1
echo "== new (nightly, MPS, ${NIGHTLY_S} s)"; grep -h '^MPS' "$R/nightly/throughput/campaign-env.txt"; tail -3 "$R/nightly.log"
