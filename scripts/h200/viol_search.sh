#!/usr/bin/env bash
# 12 processes of scripts/h200/viol_search.py on cuda (allow_out_of_range 0/1, keys 1024..16384), 150 s each.
set -u
: "${RESULTS:?}"; R="$RESULTS/viol"; mkdir -p "$R"
i=0
for oor in 0 1; do for keys in 1024 4096 16384 65536 4096 1024; do
  i=$((i+1)); OMP_NUM_THREADS=1 timeout -k 5 200 python3 scripts/h200/viol_search.py cuda $oor $keys 150 > "$R/p$i.txt" 2>&1 &
done; done
wait; grep -H . "$R"/p*.txt | cut -c1-1500
