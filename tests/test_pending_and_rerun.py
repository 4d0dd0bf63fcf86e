"""What a failing suite run leaves and prints: the pending corpus tells the truth, ids paste back.

- a recipe already pending keeps its first provenance and lists a later failure (another kernel)
  in `also_caught`, and the line says "already pending", not "saved";
- a failing reviewed corpus entry is not copied into pending;
- the captured `caught` keeps every line of the failure (the class headline and the details);
- a suite run with --pyargs from another folder prints the header (kernel, profile, device,
  Hypothesis profile), a replay command, and a pytest command per failed test that runs there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.durability.state import scrubbed_env
from conformance.records.corpus import CORPUS_DIR, load_entry, new_entry, save_pending
from conformance.suite.plugin import MAX_CAUGHT, _caught
from strategies.recipe import Recipe

REPO = Path(__file__).resolve().parents[1]
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


def test_caught_keeps_every_line() -> None:
    def fail() -> None:
        raise AssertionError(
            "class 3 (precision bug): outside every rung\nkernel output outside the a-priori bound:\n[float64] 2 lse values"
        )

    caught = _caught(pytest.CallInfo.from_call(fail, "call"))
    assert caught.count("\n") == 2 and caught.endswith("2 lse values")
    long = pytest.CallInfo.from_call(lambda: (_ for _ in ()).throw(AssertionError("x" * 5000)), "call")
    assert len(_caught(long)) == MAX_CAUGHT


def test_pyargs_run_elsewhere_prints_header_replay_and_pasteable_ids(tmp_path: Path) -> None:
    env = {**scrubbed_env(dict(os.environ)), "PYTHONPATH": str(REPO), "CONFORMANCE_PENDING_DIR": str(tmp_path / "pending")}
    env.pop("CI", None)
    kernel = "examples.fp32_buggy.kernel:fp32_buggy"
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--pyargs", "conformance", "--kernel", kernel]
    done = subprocess.run([*args, "-k", "edge-single-key"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-2000:]
    assert f"conformance: kernel {kernel}, numerics profile example-fp32-reference, device cpu; Hypothesis profile 'dev'" in out
    assert "failing recipe is the reviewed corpus entry" in out and "replay it: python -m conformance replay" in out
    rerun = [line.strip() for line in out.splitlines() if line.strip().startswith("pytest /") or line.strip().startswith("pytest '/")]
    assert len(rerun) == 1 and "test_corpus.py::test_corpus_entry[edge-single-key]" in rerun[0] and f"--kernel {kernel}" in rerun[0]
    assert not (tmp_path / "pending").exists()  # a reviewed entry is not copied
    again = subprocess.run(
        [sys.executable, "-m", *rerun[0].replace("'", "").split(), "-p", "no:cacheprovider", "-n", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert again.returncode == 1 and "1 failed" in again.stdout, again.stdout[-2000:]
