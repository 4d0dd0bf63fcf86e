"""Search for a recipe of strategies.hypothesis_recipes.violating_recipes that violates no
precondition once materialised on DEVICE (the nightly H200 campaign met one on emulated).
Usage: python3 scripts/h200/viol_search.py DEVICE ALLOW_OOR(0|1) MAX_TOTAL_KEYS SECONDS"""

from __future__ import annotations

import sys
import time

from hypothesis import HealthCheck, find, settings

from oracle.preconditions import check_call, has_violation
from strategies.hypothesis_recipes import violating_recipes
from strategies.materialize import materialize

device, oor, keys, seconds = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), float(sys.argv[4])
deadline = time.monotonic() + seconds
count = 0


def no_violation(r):  # type: ignore[no-untyped-def]
    global count
    count += 1
    if time.monotonic() > deadline:
        raise TimeoutError(f"{count} recipes, none without a violation")
    p = materialize(r, device)
    f = check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid, softmax_scale=p.softmax_scale)
    return not has_violation(f)


try:
    r = find(
        violating_recipes(allow_out_of_range=oor, max_total_keys=keys),
        no_violation,
        settings=settings(max_examples=10**7, deadline=None, database=None, suppress_health_check=list(HealthCheck)),
    )
    print("FOUND", r.to_json())
except Exception as e:  # noqa: BLE001
    print("none:", count, "recipes checked;", type(e).__name__, str(e)[:300])
