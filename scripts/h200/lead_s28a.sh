#!/usr/bin/env bash
# The lead's first H200 call of session 28 (a drive.sh step; run it as the only step, --par 560):
#   1. scripts/h200/speed28.sh ALONE (issue 21: bench and ops of oracle, bound, emulated, adapters);
#   2. a 600 s nightly campaign of every GPU kernel (lead_c.sh 600: PROCS per kernel, the cProfile
#      campaign) started DETACHED (setsid) into /tmp/camp28, so that it may outlive this call;
#      lead_s28b.sh (the next call) waits for it and collects it;
#   3. scripts/h200/peers28.sh (issue 23: Triton peers' ratios, the sglang writer) meanwhile.
# Writes under $RESULTS/: speed28/, peers28/ (the steps' own), lead28a.txt (times, what ran).
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
log="$RESULTS/lead28a.txt"
echo "start $(date -u +%T)" > "$log"
if [ -f scripts/h200/speed28.sh ]; then
  timeout -k 5 230 bash scripts/h200/speed28.sh > "$RESULTS/speed28.log" 2>&1; echo "speed28 rc=$? $(date -u +%T)" >> "$log"
else
  echo "speed28.sh absent" >> "$log"
fi
rm -rf /tmp/camp28; mkdir -p /tmp/camp28
# detached: its own session, no controlling terminal, stdio to files
( cd "$PWD" && RESULTS=/tmp/camp28 PROFILE=1 setsid nohup bash -c \
    'bash scripts/h200/lead_c.sh 600 > /tmp/camp28/campaign.log 2>&1; date -u +%s > /tmp/camp28/done' \
    < /dev/null > /dev/null 2>&1 & )
date -u +%s > /tmp/camp28/started
echo "campaign started detached $(date -u +%T)" >> "$log"
if [ -f scripts/h200/peers28.sh ]; then
  timeout -k 5 320 bash scripts/h200/peers28.sh > "$RESULTS/peers28.log" 2>&1; echo "peers28 rc=$? $(date -u +%T)" >> "$log"
else
  echo "peers28.sh absent" >> "$log"
fi
pgrep -f "conformance fuzz" | wc -l | sed 's/^/fuzz processes running at the end of call a: /' >> "$log"
cat "$log"
