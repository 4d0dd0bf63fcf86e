"""conformance.tools.host_memory: freed host memory is reused without new page faults, and
$CONFORMANCE_KEEP_FREED_MEMORY=0 leaves malloc's defaults (each case in a fresh interpreter:
the setting is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# a 64 MiB tensor written and freed, then a 32 MiB one written: the minor page faults of the second
PROBE = """
import json, resource, torch
from conformance.tools.host_memory import keep_freed_memory
kept = keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
x = torch.empty(1 << 23, dtype=torch.float64).fill_(1.0)
del x
before = faults()
y = torch.empty(1 << 22, dtype=torch.float64).fill_(2.0)
print(json.dumps({"kept": kept, "faults": faults() - before}))
"""


def _probe(env_value: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env.pop("CONFORMANCE_KEEP_FREED_MEMORY", None)
    if env_value is not None:
        env["CONFORMANCE_KEEP_FREED_MEMORY"] = env_value
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_memory_is_reused_without_page_faults() -> None:
    kept = _probe(None)
    if not kept["kept"]:
        pytest.skip("this C library has no working mallopt (not glibc)")
    default = _probe("0")
    assert default["kept"] is False
    pages = (1 << 22) * 8 // 4096  # the second tensor's 8192 pages of 4 KiB
    assert int(default["faults"]) > pages // 2  # a fresh mapping: every page faulted in again
    assert int(kept["faults"]) < pages // 16  # the freed pages reused as they are
