"""Recipes are checked against a memory estimate before anything is materialised ."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main
from strategies import materialize as mat
from strategies.recipe import REFERENCE_KEY_BUDGET_, SMALL_CACHE_BYTES_, Recipe, RecipeError, RecipeTooLarge, memory_estimate
from tests.recipes import SIXTEEN_KEYS

HUGE = {"seed": 1, "n_q": 1, "heads": 1, "row_lengths": [1_000_000_000], "cache_rows": 1000}
REPO = Path(__file__).resolve().parents[2]


def test_constants_mirror_their_sources() -> None:
    from oracle.rows import REFERENCE_KEY_BUDGET

    assert REFERENCE_KEY_BUDGET_ == REFERENCE_KEY_BUDGET
    assert SMALL_CACHE_BYTES_ == mat.SMALL_CACHE_BYTES


def test_estimate_grows_with_keys_rows_and_cache() -> None:
    small = memory_estimate(SIXTEEN_KEYS)
    assert small.device_bytes == 0 and small.host_bytes < 64 * 2**20
    longer = memory_estimate(Recipe(seed=1, n_q=1, heads=1, row_lengths=(100_000,), cache_rows=100_000))
    assert 2 * 2**30 < longer.host_bytes < 8 * 2**30  # measured: about 3.3 GiB (materialise + reference)
    huge = memory_estimate(Recipe.from_json_dict(HUGE))
    assert huge.host_bytes > 2**40
    # an over-4-GiB cache is untouched pages on the CPU but a real allocation on a GPU
    big_cache = Recipe(seed=1, n_q=1, heads=1, row_lengths=(8,), cache_rows=7_000_000, index_pattern="beyond_4gib")
    assert memory_estimate(big_cache, "cpu").host_bytes < 2**30
    assert memory_estimate(big_cache, "cuda").device_bytes > 4 * 2**30


def test_every_shipped_corpus_entry_fits_in_a_gib() -> None:
    from conformance.records.corpus import corpus_files, load_entry

    worst = max(memory_estimate(load_entry(p).recipe).host_bytes for p in corpus_files())
    assert worst < 2**30


@pytest.mark.parametrize(
    ("text", "value"), [("8GiB", 8 * 2**30), ("8G", 8 * 2**30), ("8GB", 8 * 10**9), ("512m", 512 * 2**20), ("1e9", 10**9), ("0", 0)]
)
def test_parse_size(text: str, value: int) -> None:
    assert mat.parse_size(text) == value


def test_parse_size_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="not a size"):
        mat.parse_size("lots")


def test_too_large_is_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RecipeTooLarge) as info:
        mat.materialize(Recipe.from_json_dict(HUGE))
    message = str(info.value)
    assert isinstance(info.value, RecipeError) and len(message.splitlines()) == 1
    assert "needs about" in message and "limit" in message and "CONFORMANCE_MEMORY_LIMIT" in message
    monkeypatch.setenv(mat.MEMORY_LIMIT_ENV, "100KiB")
    with pytest.raises(RecipeTooLarge, match=r"limit 100.0 KiB \(\$CONFORMANCE_MEMORY_LIMIT=100KiB\)"):
        mat.materialize(SIXTEEN_KEYS)
    monkeypatch.setenv(mat.MEMORY_LIMIT_ENV, "0")  # no limit
    assert mat.materialize(SIXTEEN_KEYS).q.shape == (1, 1, 576)
    monkeypatch.setenv(mat.MEMORY_LIMIT_ENV, "plenty")
    with pytest.raises(RecipeTooLarge, match="CONFORMANCE_MEMORY_LIMIT: not a size"):
        mat.check_memory(SIXTEEN_KEYS)


def _entry(tmp_path: Path) -> Path:
    import json

    path = tmp_path / "huge.json"
    path.write_text(
        json.dumps(
            {
                "name": "huge",
                "expect": "conform",
                "recipe": HUGE,
                "provenance": {"caught": "a test", "kernel": "emulated", "property": "x"},
            }
        ),
        encoding="utf-8",
    )
    return path


def test_replay_of_a_huge_recipe_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    path = _entry(tmp_path)
    assert main(["replay", str(path), "--kernel", "emulated"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "recipe too large: needs about" in err and "of host memory" in err and "limit" in err
    assert main(["replay", str(path), "--kernel", "emulated", "--memory-limit", "lots"]) == 2
    assert "--memory-limit: not a size" in capsys.readouterr().err
    assert main(["corpus", "minimise", str(path), "--kernel", "emulated"]) == 2
    assert "recipe too large" in capsys.readouterr().err


def test_replay_isolated_of_a_huge_recipe_exits_2(tmp_path: Path) -> None:
    """The child of --isolate refuses it too (under a 4 GiB address-space cap, in case it did not)."""
    import os

    from conformance.durability.state import scrubbed_env

    env = {**scrubbed_env(dict(os.environ)), "CONFORMANCE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)); "
        "from conformance.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "replay", str(_entry(tmp_path)), "--kernel", "emulated", "--isolate", "--memory-limit", "2GiB"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "recipe too large" in proc.stderr
        and "limit 2.0 GiB ($CONFORMANCE_MEMORY_LIMIT=2GiB)" in proc.stderr
        and "Traceback" not in proc.stderr
    )
