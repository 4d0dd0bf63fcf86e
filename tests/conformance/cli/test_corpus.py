"""`python -m conformance corpus list|add|minimise` and `replay` on constructed entries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.durability.state import kernel_slug
from conformance.records.corpus import CORPUS_DIR, load_entry, recipe_hash
from strategies.recipe import Recipe

BROKEN = "conformance.mutation.catalogue:lse_base2"  # lse in log2 units: every non-empty row's lse is wrong
SMALL = {
    "seed": 5,
    "n_q": 3,
    "heads": 4,
    "row_lengths": [40, 0, 7],
    "cache_rows": 300,
    "return_lse": True,
    "q_pad": [3, 1],
    "latent": "heavy",
    "softmax_scale": "peaked",
}


def _entry(name: str, recipe: dict[str, Any], *, expect: str = "conform", caught: str = "test") -> dict[str, Any]:
    full = Recipe.from_json_dict(recipe).to_json_dict()
    return {
        "name": name,
        "recipe": full,
        "expect": expect,
        "provenance": {"caught": caught, "kernel": "any", "date": "2026-01-01", "suite_version": "0.1.0", "property": "test"},
    }


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2), encoding="utf-8")
    return path


@pytest.fixture()
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    reviewed, pending = tmp_path / "corpus", tmp_path / "corpus" / "pending"
    reviewed.mkdir()
    pending.mkdir()
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(pending))
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return reviewed, pending


def _corpus(reviewed: Path, *args: str) -> int:
    return main(["corpus", "--corpus", str(reviewed), *args])


# ---------------------------------------------------------------------------------------------
# replay


def test_replay_edge_entry_conforms(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", str(CORPUS_DIR / "edge-tile-129.json"), "--kernel", "emulated"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "reviewed entry" in out and "entry:  edge-tile-129, expect conform" in out
    assert "hold:    bad_dtype" in out  # every precondition holds
    for mode in ("exact-steps", "float64"):
        for output in ("out", "lse"):
            assert f"  {mode:<12} {output:<6}" in out  # max error, bound, ratio per output and mode
    assert "verdict: CONFORMS" in out


def test_replay_failing_entry_names_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "failing.json", _entry("failing", SMALL))
    json_path = tmp_path / "diag.json"
    code = main(["replay", str(path), "--kernel", BROKEN, "--top", "3", "--json", str(json_path)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "verdict: FAILS" in out
    assert "[exact-steps] lse: 8 of 12 values exceed the bound; worst:" in out  # 2 non-empty rows x 4 heads
    assert "by row  row 0: 4 over" in out and "row 2: 4 over" in out
    assert "by head" in out and "(row 0, head" in out
    assert "[float64] lse: the same 8 values exceed as in [exact-steps]" in out
    diag = json.loads(json_path.read_text(encoding="utf-8"), parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    assert diag["outcome"] == "fail" and diag["exit_code"] == 1
    lse = next(c for c in diag["comparisons"] if c["mode"] == "exact-steps" and c["output"] == "lse")
    assert lse["exceeding"] == 8 and len(lse["top_elements"]) == 3
    assert {g["row"] for g in lse["by"]["row"]} == {0, 2}


def test_replay_precondition_entry_and_bare_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _write(
        tmp_path / "raw.json",
        _entry("raw", {"seed": 4, "n_q": 1, "heads": 2, "row_lengths": [20], "cache_rows": 64, "writer": "raw"}, expect="precondition"),
    )
    code = main(["replay", str(raw), "--kernel", "emulated"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "VIOLATED scale_not_pow2" in out and "behaviour under the violation: returned" in out
    assert "verdict: PROMISES HOLD" in out
    recipe = _write(tmp_path / "bare.json", {"seed": 3, "n_q": 1, "heads": 1, "row_lengths": [3], "cache_rows": 16})
    assert main(["replay", str(recipe), "--kernel", "emulated"]) == 0
    out = capsys.readouterr().out
    assert "(bare recipe)" in out and "expect conform" in out


MALFORMED: dict[str, tuple[str | None, str]] = {
    "not_json.json": ("{ this is not json", "not valid JSON"),
    "array.json": ("[1, 2, 3]", "must be a JSON object, got list"),
    "bad_field.json": (json.dumps({"name": "x", "recipe": {**SMALL, "heads": 99}}), "bad recipe: heads must be in [1, 16], got 99"),
    "unknown_field.json": (json.dumps({"name": "x", "recipe": SMALL, "color": "red"}), "unknown field(s) color"),
    "bad_expect.json": (json.dumps({"name": "x", "recipe": SMALL, "expect": "maybe"}), "expect must be one of"),
    "not_a_recipe.json": (json.dumps({"hello": 1}), "neither a corpus entry"),
    "missing.json": (None, "no such file"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, dirs: tuple[Path, Path]
) -> None:
    text, problem = MALFORMED[name]
    path = tmp_path / name
    if text is not None:
        path.write_text(text, encoding="utf-8")
    for argv in (
        ["replay", str(path), "--kernel", "emulated"],
        ["corpus", "add", str(path)],
        ["corpus", "minimise", str(path), "--kernel", "emulated"],
    ):
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1, captured.err
        assert str(path) in lines[0] and problem in lines[0], lines[0]
        assert "Traceback" not in captured.err + captured.out


def test_replay_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "e.json", _entry("e", SMALL))
    assert main(["replay", str(path), "--kernel", "no_such_kernel"]) == 2
    assert "unknown kernel 'no_such_kernel'" in capsys.readouterr().err
    assert main(["replay", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# corpus list / add / minimise


def test_list_shows_every_good_entry_and_names_bad_files(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    reviewed, pending = dirs
    _write(reviewed / "edge-a.json", _entry("edge-a", SMALL))
    _write(pending / "my_kernel-fn" / "abc.json", _entry("found-b", {**SMALL, "seed": 6}, caught="fuzz differential: lse out of bound"))
    _write(pending / "broken.json", "{oops")
    code = _corpus(reviewed, "list")
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.out.splitlines()
    assert lines[0].split() == ["NAME", "EXPECT", "STATUS", "PROVENANCE", "FILE"]
    row_a = next(line for line in lines if line.startswith("edge-a"))
    row_b = next(line for line in lines if line.startswith("found-b"))
    assert " conform " in row_a and " reviewed " in row_a and "edge-a.json" in row_a
    assert " pending " in row_b and "fuzz differential: lse out of bound" in row_b
    assert "2 entries (1 reviewed, 1 pending), 1 unreadable" in captured.out
    assert "broken.json: not valid JSON" in captured.err
    assert _corpus(reviewed, "list", "--pending-only", "--json") == 2
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows] == ["found-b"] and rows[0]["status"] == "pending"


def test_add_moves_a_pending_entry(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    reviewed, pending = dirs
    source = _write(pending / "emulated" / "x.json", _entry("found", SMALL))  # a kernel's pending folder
    assert _corpus(reviewed, "add", str(source)) == 0
    target = reviewed / f"{recipe_hash(Recipe.from_json_dict(SMALL))}.json"
    assert f"added found (expect conform) as {target} (moved from pending)" in capsys.readouterr().out
    assert target.exists() and not source.exists()
    assert load_entry(target).provenance["caught"] == "test"
    again = _write(pending / "y.json", _entry("found-again", SMALL))
    assert _corpus(reviewed, "add", str(again)) == 0
    assert "already in the reviewed corpus" in capsys.readouterr().out and again.exists()


def test_add_imports_a_recipe_with_provenance(dirs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reviewed, _ = dirs
    raw = {"seed": 9, "n_q": 1, "heads": 2, "row_lengths": [5], "cache_rows": 32, "writer": "raw"}
    source = _write(tmp_path / "server.json", raw)
    assert _corpus(reviewed, "add", str(source)) == 2
    assert "a bare recipe needs its provenance: --caught" in capsys.readouterr().err
    assert (
        _corpus(
            reviewed, "add", str(source), "--caught", "dumped from a vLLM 0.26 server", "--kernel", "flydsl", "--property", "server-dump"
        )
        == 0
    )
    capsys.readouterr()
    entry = load_entry(reviewed / f"{recipe_hash(Recipe.from_json_dict(raw))}.json")
    assert entry.expect == "precondition"  # inferred: the raw writer breaks the pow2 precondition
    assert entry.provenance["caught"] == "dumped from a vLLM 0.26 server" and entry.provenance["kernel"] == "flydsl"
    assert entry.name == f"server-dump-{recipe_hash(entry.recipe)}" and source.exists()


def test_minimise_shrinks_while_failing_the_same_way(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, pending = dirs
    original = _write(pending / "big.json", _entry("lse-bug", SMALL))
    before = original.read_text(encoding="utf-8")
    assert main(["corpus", "minimise", str(original), "--kernel", BROKEN]) == 0
    captured = capsys.readouterr()
    assert "the original" in captured.out and "is kept" in captured.out
    assert original.read_text(encoding="utf-8") == before
    written = [p for p in pending.rglob("*.json") if p != original]
    assert [p.parent for p in written] == [pending / kernel_slug(BROKEN)]  # the kernel's pending folder
    small = load_entry(written[0])
    assert small.name == "lse-bug-min" and small.provenance["minimised_from"] == "big.json"
    r = small.recipe
    assert (r.n_q, r.heads, r.total_keys) == (1, 1, 1)
    assert (r.latent, r.softmax_scale, r.q_pad, r.return_lse) == ("normal", "default", (0, 0), True)  # lse kept: it is the failure
    assert main(["replay", str(written[0]), "--kernel", BROKEN]) == 1  # still fails
    out = capsys.readouterr().out
    assert "lse values exceed the bound" in out
    # a conforming entry cannot be minimised
    assert main(["corpus", "minimise", str(written[0]), "--kernel", "emulated"]) == 1
    assert "does not fail with kernel emulated" in capsys.readouterr().out


def test_minimise_keeps_a_precondition_entry_violating(tmp_path: Path, dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(
        tmp_path / "above.json",
        _entry(
            "above-cap",
            {"seed": 4, "n_q": 2, "heads": 2, "row_lengths": [20, 3], "cache_rows": 64, "latent": "above_cap"},
            expect="precondition",
        ),
    )
    assert main(["corpus", "minimise", str(path), "--kernel", "emulated"]) == 1  # the promise holds: nothing to do
    assert "nothing to minimise" in capsys.readouterr().out
    assert main(["corpus", "minimise", str(path), "--kernel", "conformance.mutation.catalogue:scale_cap_missing"]) == 0  # inf output
    capsys.readouterr()
    assert [p for p in tmp_path.glob("*.json") if p != path] == []  # nothing written next to the original
    small = load_entry(next((dirs[1] / "conformance.mutation.catalogue-scale_cap_missing").glob("*.json")))  # the kernel's pending folder
    assert small.expect == "precondition" and small.recipe.latent == "above_cap"  # still violating, the same way
    assert (small.recipe.heads, small.recipe.total_keys) == (1, 1)


# ---------------------------------------------------------------------------------------------
# Strict loading, clear write errors, minimise honours the folders


def test_an_entry_without_expect_is_refused(tmp_path: Path, dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = _entry("no-expect", SMALL)
    del data["expect"]
    path = _write(tmp_path / "no-expect.json", data)
    assert main(["replay", str(path), "--kernel", "emulated"]) == 2
    err = capsys.readouterr().err
    assert "missing field 'expect'" in err and str(path) in err and len(err.strip().splitlines()) == 1
    assert main(["replay", str(path), "--kernel", "emulated", "--expect", "conform"]) == 0  # --expect supplies it
    capsys.readouterr()
    assert _corpus(dirs[0], "add", str(path)) == 2
    assert "missing field 'expect'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../../evil", "a/b", ".hidden", "a\\b", "x" * 201, ""])
def test_an_entry_name_that_is_a_path_is_refused(
    name: str, tmp_path: Path, dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "named.json", _entry(name, SMALL))
    assert _corpus(dirs[0], "add", str(path)) == 2
    assert "name" in capsys.readouterr().err
    assert list(dirs[0].glob("*.json")) == []
    good = _write(tmp_path / "good.json", _entry("fine", SMALL))
    assert _corpus(dirs[0], "add", str(good), "--name", "../x") == 2
    assert "not a plain name" in capsys.readouterr().err


def test_a_non_utf8_file_in_pending_does_not_hide_the_others(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    reviewed, pending = dirs
    _write(pending / "good.json", _entry("good-one", SMALL))
    (pending / "bad.json").write_bytes(b'\xff\xfe{"name": 1}')
    assert _corpus(reviewed, "list") == 2
    captured = capsys.readouterr()
    assert "good-one" in captured.out and "1 unreadable" in captured.out
    assert "bad.json: not UTF-8 text" in captured.err and "Traceback" not in captured.err


def test_save_entry_into_an_unwritable_folder_is_a_corpus_write_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.records.corpus import CorpusWriteError, new_entry, save_entry

    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x", encoding="utf-8")
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(blocked / "pending"))
    entry = new_entry(Recipe.from_json_dict(SMALL), caught="t", kernel="k", property_name="p")
    with pytest.raises(CorpusWriteError) as info:
        save_entry(entry, blocked / "pending")
    assert isinstance(info.value, OSError) and str(blocked / "pending") in str(info.value)
    assert "CONFORMANCE_PENDING_DIR" in str(info.value) and len(str(info.value).splitlines()) == 1


def test_minimise_writes_to_pending_and_honours_corpus(tmp_path: Path, dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The smaller entry of a reviewed entry goes to the pending folder, not next to it; with
    --corpus naming a folder that already holds the smaller recipe, nothing is written."""
    reviewed, pending = dirs
    other = tmp_path / "other-reviewed"
    other.mkdir()
    original = _write(reviewed / "big.json", _entry("lse-bug", SMALL))
    assert main(["corpus", "--corpus", str(other), "minimise", str(original), "--kernel", BROKEN, "--max-tries", "60"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in reviewed.glob("*.json")) == ["big.json"]  # the reviewed folder is untouched
    written = list(pending.rglob("*.json"))
    assert len(written) == 1 and "pending folder" in out and f"--corpus {other}" in out
    # the same smaller recipe already reviewed in --corpus: nothing new
    written[0].rename(other / written[0].name)
    assert main(["corpus", "--corpus", str(other), "minimise", str(original), "--kernel", BROKEN, "--max-tries", "60"]) == 0
    assert "already in the reviewed corpus" in capsys.readouterr().out
    assert list(pending.rglob("*.json")) == []


def test_replay_without_kernel_says_which_kernel_ran(tmp_path: Path, dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = _entry("caught-elsewhere", SMALL)
    data["provenance"]["kernel"] = "flashmla"
    path = _write(tmp_path / "elsewhere.json", data)
    from kernel.registry import default_kernel_name

    default = default_kernel_name()
    if default != "emulated":
        pytest.skip("the machine's default kernel is not emulated")
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "the machine's default: no --kernel given" in out
    assert "NOTE:   the entry was caught with kernel flashmla; this replay runs emulated, not flashmla" in out
    assert "verdict: CONFORMS" in out and out.rstrip().endswith("(kernel emulated)")
    assert main(["replay", str(path), "--kernel", "emulated"]) == 0
    out = capsys.readouterr().out
    assert "no --kernel given" not in out and "NOTE:" in out
