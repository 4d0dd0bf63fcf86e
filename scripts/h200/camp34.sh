#!/usr/bin/env bash
# Issue 21's emulated-alone campaign on the H200 (one device call): `emulated` in $PROCS
# processes (default 15, one core left for the driver) for SECONDS (default 300) under
# scripts/h200/final_throughput.sh campaign (nightly profile, OMP_NUM_THREADS=1 each, no cProfile
# process), results under "$RESULTS/throughput" (campaigns.txt / .md: the processes merged).
# Wall time: at most SECONDS + 70 s.
set -u
S="${1:-300}"
KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=0 bash scripts/h200/final_throughput.sh campaign "$S"
