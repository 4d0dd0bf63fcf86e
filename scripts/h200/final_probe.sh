#!/usr/bin/env bash
# Final H200 call for issue 20 (<= 420 s wall, beside other scripts on the one GPU):
#  1. `python -m conformance probe` against each kernel (in parallel), writing its measured profile;
#  2. the conformance suite against each kernel under its probed profile (in parallel, -n 3 each),
#     each with its own state folder so the run folders can be told apart;
#  3. max / median out and lse err/bound per run (scripts/peers_features.py).
# Writes under $RESULTS/probe/: <k>.toml, probe-<k>.log, suite-<k>.log, features-<k>.json,
# summary.txt. KERNELS and DEVICE override the kernel list and the device (CPU logic test:
# KERNELS=emulated DEVICE=cpu PROBE_S=120 SUITE_S=60 bash scripts/h200/final_probe.sh).
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/probe"; mkdir -p "$R"
KERNELS=${KERNELS:-"flashmla flashmla-prefill torch-sdpa"}
DEVICE=${DEVICE:-cuda}
PROBE_S=${PROBE_S:-110}
SUITE_S=${SUITE_S:-270}
{
  date -u +%FT%TZ
  timeout 10 nvidia-smi -L 2>/dev/null || true
  echo "=== probe ($(date -u +%T)): $KERNELS on $DEVICE"
  for k in $KERNELS; do
    ( /usr/bin/time -f "probe $k wall %e s" timeout "$PROBE_S" python3 -m conformance probe --kernel "$k" --device "$DEVICE" \
        --thorough --out "$R/$k.toml" --json "$R/probe-$k.json" > "$R/probe-$k.log" 2>&1; echo "probe $k rc=$?" >> "$R/probe-$k.log" ) &
  done
  wait
  for k in $KERNELS; do echo "--- probe $k"; sed -n '/^probe .* probes in/,$p' "$R/probe-$k.log"; done
  echo "=== suites ($(date -u +%T))"
  for k in $KERNELS; do
    if [ -s "$R/$k.toml" ]; then
      ( CI=1 CONFORMANCE_DIR="$R/state-$k" CONFORMANCE_PENDING_DIR="$R/pending-$k" timeout "$SUITE_S" \
          python3 -m pytest conformance --kernel "$k" --profile "$R/$k.toml" -n 3 -q -rfE -p no:cacheprovider \
          > "$R/suite-$k.log" 2>&1; echo "suite $k rc=$?" >> "$R/suite-$k.log" ) &
    else
      echo "suite $k: no probed profile" > "$R/suite-$k.log"
    fi
  done
  wait
  for k in $KERNELS; do
    echo "--- suite $k"; grep -E "^(FAILED|ERROR)" "$R/suite-$k.log" | head -20; tail -2 "$R/suite-$k.log"
    if ls "$R/state-$k/runs/"* > /dev/null 2>&1; then
      timeout 60 python3 scripts/peers_features.py "$R/state-$k/runs/"* --json "$R/features-$k.json" > /dev/null 2>&1
      timeout 20 python3 - "$R/features-$k.json" <<'EOF'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except (OSError, ValueError) as err:
    print(f"  features: {err}"); sys.exit(0)
for run in data if isinstance(data, list) else [data]:
    print(f"  out err/bound {run.get('out_ratio')}  lse err/bound {run.get('lse_ratio')}  examples {run.get('examples')}  outcomes {run.get('outcomes')}")
EOF
    fi
  done
  date -u +%FT%TZ
} 2>&1 | tee "$R/summary.txt"
