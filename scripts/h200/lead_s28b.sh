#!/usr/bin/env bash
# The lead's second H200 call of session 28 (a drive.sh step, --par 560): collects the detached
# campaign lead_s28a.sh started (waits for /tmp/camp28/done, at most 480 s). If it did not survive
# the end of the first call (no fuzz process, no done marker), says so and runs the campaign here,
# 450 s. Then, if time is left, KERNELS=emulated PROCS=15 campaign 100 s (examples/s of the host).
# Writes $RESULTS/camp28/ (the campaign's throughput/ folder and log), $RESULTS/lead28b.txt.
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
log="$RESULTS/lead28b.txt"
t0=$(date +%s)
echo "start $(date -u +%T); fuzz processes now: $(pgrep -f 'conformance fuzz' | wc -l)" > "$log"
if [ -f /tmp/camp28/started ] && { [ -f /tmp/camp28/done ] || pgrep -f "conformance fuzz" > /dev/null; }; then
  echo "the detached campaign survived (started $(cat /tmp/camp28/started))" >> "$log"
  while [ ! -f /tmp/camp28/done ] && [ $(( $(date +%s) - t0 )) -lt 480 ]; do sleep 5; done
  echo "done marker: $(cat /tmp/camp28/done 2> /dev/null || echo none) at $(date -u +%T)" >> "$log"
else
  echo "the detached campaign did not survive the end of call a: running it here (450 s)" >> "$log"
  rm -rf /tmp/camp28; mkdir -p /tmp/camp28
  RESULTS=/tmp/camp28 PROFILE=1 timeout -k 10 530 bash scripts/h200/lead_c.sh 450 > /tmp/camp28/campaign.log 2>&1
  echo "campaign rc=$? at $(date -u +%T)" >> "$log"
fi
mkdir -p "$RESULTS/camp28" && cp -r /tmp/camp28/. "$RESULTS/camp28/"
left=$(( 540 - ($(date +%s) - t0) ))
if [ "$left" -gt 190 ]; then
  mkdir -p /tmp/emu15; RESULTS=/tmp/emu15 KERNELS=emulated PROCS=15 PROFILE=0 timeout -k 10 $(( left - 20 )) \
    bash scripts/h200/final_throughput.sh campaign 100 > /tmp/emu15/campaign.log 2>&1
  echo "emulated x15 rc=$? at $(date -u +%T)" >> "$log"
  mkdir -p "$RESULTS/emu15" && cp -r /tmp/emu15/. "$RESULTS/emu15/"
else
  echo "no time left for the emulated x15 campaign ($left s)" >> "$log"
fi
cat "$log"
