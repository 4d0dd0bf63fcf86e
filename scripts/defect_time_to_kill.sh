#!/usr/bin/env bash
# Time to kill each precision defect (conformance.mutation.catalogue.PRECISION_DEFECTS) with the
# differential and metamorphic properties, ci Hypothesis profile, stopping at the first failure.
# Usage: DEVICE=cuda bash scripts/defect_time_to_kill.sh [seconds per defect]
set -u
export PYTHONUNBUFFERED=1
LIMIT=${1:-60}
DEV=${DEVICE:-cpu}
for name in $(python3 -c "from conformance.mutation.catalogue import PRECISION_DEFECTS as d; print(' '.join(d))"); do
  start=$(date +%s.%N)
  log=$(timeout "$LIMIT" python3 -m pytest conformance/suite/test_differential.py conformance/suite/test_metamorphic.py \
        --kernel "conformance.mutation.catalogue:$name" --device "$DEV" --hypothesis-profile ci -x -q -p no:cacheprovider \
        ${WORKERS:+-n $WORKERS} 2>&1)
  rc=$?
  took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
  first=$(echo "$log" | grep -m1 -E "^FAILED" | sed 's/ - .*//')
  echo "$name rc=$rc ${took}s ${first:-not killed}"
done
