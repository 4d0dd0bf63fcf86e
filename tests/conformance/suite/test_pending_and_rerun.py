"""What a failing suite run leaves and prints: the pending corpus tells the truth, commands run as printed.

- a recipe already pending keeps its first provenance and lists a later failure (another kernel)
  in `also_caught`, and the line says "already pending", not "saved";
- a failing reviewed corpus entry is not copied into pending;
- a failure's description keeps every line of its message (up to MAX_MESSAGE) and its finding;
- a suite run of a user's kernel from the user's folder (`PYTHONPATH=.`, --pyargs) prints the
  header (kernel, profile, device, Hypothesis profile, where failures go), one report per distinct
  failure, and replay and rerun commands that run as printed from another folder without
  PYTHONPATH; the failing recipes land in the user's folder, per kernel.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conformance.durability.state import scrubbed_env
from conformance.judging.finding import Finding, failure
from conformance.records.corpus import CORPUS_DIR, load_entry, new_entry, save_pending
from conformance.suite.failures import MAX_MESSAGE, describe
from strategies.recipe import Recipe

REPO = Path(__file__).resolve().parents[3]
RECIPE = Recipe(seed=9, n_q=1, heads=1, row_lengths=(3,), cache_rows=10)


def test_a_repeat_keeps_the_first_provenance_and_lists_the_second(tmp_path: Path) -> None:
    first = new_entry(RECIPE, caught="t: class 3 ...", kernel="a:k", property_name="differential")
    path, said = save_pending(first, tmp_path)
    assert said == f"saved to {path}"
    again, said = save_pending(new_entry(RECIPE, caught="t: class 3 ...", kernel="a:k", property_name="differential"), tmp_path)
    assert again == path and said.startswith(f"already pending as {path} (the same failure")
    other = new_entry(RECIPE, caught="t: class 1 ...", kernel="b:k", property_name="corpus")
    _, said = save_pending(other, tmp_path)
    assert "already pending" in said and "from kernel a:k" in said and "also_caught" in said
    kept = load_entry(path)
    assert kept.provenance["kernel"] == "a:k"
    assert [c["kernel"] for c in kept.provenance["also_caught"]] == ["b:k"]
    save_pending(other, tmp_path)  # the same second failure is listed once
    assert len(load_entry(path).provenance["also_caught"]) == 1


def test_a_reviewed_entry_is_not_copied_to_pending(tmp_path: Path) -> None:
    reviewed = load_entry(CORPUS_DIR / "edge-single-key.json")
    path, said = save_pending(new_entry(reviewed.recipe, caught="x", kernel="k", property_name="corpus"), tmp_path)
    assert path == CORPUS_DIR / "edge-single-key.json" and "reviewed corpus entry" in said
    assert not list(tmp_path.iterdir())


def test_a_description_keeps_every_line_and_the_finding() -> None:
    err = failure(Finding("wrong result", "lse outside the bound", "x 300"), "kernel output outside the a-priori bound:\n[float64] 2 lse")
    info = describe("t.py::test", err, None, kernel="k")
    assert info["finding"] == {"kind": "wrong result", "subject": "lse outside the bound", "detail": "x 300"}
    assert info["message"].count("\n") == 2 and info["lines"] == ["kernel output outside the a-priori bound:", "[float64] 2 lse"]
    long = describe("t.py::test", AssertionError("x" * 5000), None, kernel="k")
    assert len(long["message"]) == MAX_MESSAGE and long["finding"]["kind"] == "suite error"


BUGGY = """
import math
from fp32_reference.kernel import PROFILE, fp32_reference


def my_attention(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    out, lse = fp32_reference(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    return out, (None if lse is None else lse / math.log(2.0))


my_attention.profile = PROFILE
"""


def _user_folder(tmp_path: Path) -> Path:
    """A user's folder outside the checkout: the reference kernel as a package of its own and a buggy kernel module."""
    import shutil

    user = tmp_path / "work"
    shutil.copytree(REPO / "examples" / "fp32_reference", user / "fp32_reference")
    (user / "bug_lse.py").write_text(BUGGY, encoding="utf-8")
    return user


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.long
def test_a_user_kernel_run_saves_in_the_users_folder_and_prints_commands_that_run(tmp_path: Path) -> None:
    user = _user_folder(tmp_path)
    env = {**scrubbed_env(dict(os.environ)), "PYTHONPATH": f".:{REPO}"}
    for name in ("CI", "CONFORMANCE_PENDING_DIR", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    command = (
        "pytest -p no:cacheprovider -n 0 --pyargs conformance --conformance-kernel bug_lse:my_attention "
        "--hypothesis-profile ci -k 'edge-single-key or edge-sixteen-heads or test_differential and not long and not beyond'"
    )
    done = _run(command, user, env)
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-2000:]
    assert "conformance: kernel bug_lse:my_attention, numerics profile example-fp32-reference, device cpu; Hypothesis profile 'ci'" in out
    pending = user / ".conformance" / "pending" / "bug_lse-my_attention"
    assert f"conformance: failing recipes saved to {pending}" in out
    assert "conformance: 1 distinct failure in 3 failing tests of bug_lse:my_attention" in out, out[-3000:]
    assert "Traceback" not in out and "reproduce_failure" not in out and "Falsifying example" not in out, out
    saved = sorted(pending.glob("*.json"))
    assert len(saved) == 1, out  # the Hypothesis failure; the failing reviewed entries are not copied
    commands = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith(("replay:", "rerun:"))]
    assert len(commands) == 2 and all("/bug_lse.py:my_attention" in c for c in commands), out
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plain = {k: v for k, v in env.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(REPO)}  # the suite installed; not the user's folder
    for pasted in commands:
        again = _run(pasted + (" -p no:cacheprovider -n 0" if " pytest " in f" {pasted}" else ""), elsewhere, plain)
        assert again.returncode == 1, (pasted, again.stdout[-2000:], again.stderr[-2000:])
        assert "No module named" not in again.stdout + again.stderr
