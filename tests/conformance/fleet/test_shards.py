"""Shards (conformance.fleet.shards): `i/n` and the CI systems' variables, the durations-balanced
split of tests (disjoint, covering, the same in every process), fuzz seed streams (disjoint per
shard, the same on a rerun), and the plugin's split of a real collection."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.fleet import shards
from conformance.fleet.shards import Shard, ShardError, from_environment, parse_shard, split

ROOT = Path(__file__).resolve().parents[3]


def test_parse_shard_reads_i_of_n_and_names_the_option_when_it_cannot() -> None:
    assert parse_shard("2/4") == Shard(2, 4, "--shard")
    assert str(parse_shard(" 1/1 ")) == "1/1" and not parse_shard("1/1").sharded
    for bad in ("0/4", "5/4", "2", "a/b", "2/0", "-1/3"):
        with pytest.raises(ShardError, match=r"--shard: expected i/n"):
            parse_shard(bad)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"CONFORMANCE_SHARD": "3/8", "BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "2"}, (3, 8)),
        ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, (1, 4)),
        ({"BUILDKITE_PARALLEL_JOB": "3", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, (4, 4)),
        ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_MIN": "0"}, (1, 16)),
        ({"SLURM_ARRAY_TASK_ID": "16", "SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_MIN": "1"}, (16, 16)),
        (
            {"SLURM_ARRAY_TASK_ID": "30", "SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "2"},
            (16, 16),
        ),
        ({"JOB_COMPLETION_INDEX": "0", "CONFORMANCE_SHARD_COUNT": "5"}, (1, 5)),
        ({"JOB_COMPLETION_INDEX": "4", "CONFORMANCE_SHARD_COUNT": "5"}, (5, 5)),
    ],
)
def test_the_ci_systems_variables_name_the_shard_with_their_own_numbering(env: dict[str, str], expected: tuple[int, int]) -> None:
    shard = from_environment(env)
    assert shard is not None and (shard.index, shard.count) == expected and shard.source


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JOB_COMPLETION_INDEX": "2"}, "CONFORMANCE_SHARD_COUNT is not"),
        ({"BUILDKITE_PARALLEL_JOB": "4", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "expected 0 <= job < count"),
        ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_STEP": "2"}, "SLURM_ARRAY_TASK_ID=3 is not one"),
        ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"}, "SLURM_ARRAY_TASK_ID='x' is not an integer"),
        ({"CONFORMANCE_SHARD": "9/8"}, r"\$CONFORMANCE_SHARD: expected"),
    ],
)
def test_a_variable_set_but_unusable_is_an_error_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(ShardError, match=message):
        from_environment(env)


def test_an_option_wins_and_no_variable_means_one_shard() -> None:
    assert shards.resolve("2/3", {"CONFORMANCE_SHARD": "1/2"}) == Shard(2, 3, "--shard")
    assert shards.resolve(None, {}) == shards.UNSHARDED
    assert from_environment({"PATH": "/bin"}) is None


def _ids(n: int) -> list[str]:
    return [f"tests/test_x.py::test_{i:03d}" for i in range(n)]


def test_split_is_disjoint_covering_and_the_same_whatever_the_order_seen() -> None:
    rng = random.Random(7)
    ids = _ids(97)
    durations = {i: rng.expovariate(1.0) for i in ids[:80]}  # 17 tests never timed
    groups = split(ids, 6, durations)
    assert sorted(x for g in groups for x in g) == sorted(ids)
    assert sum(len(g) for g in groups) == len(ids)
    for group in groups:
        assert group == [i for i in ids if i in set(group)]  # the collection's order kept
    shuffled = ids[:]
    rng.shuffle(shuffled)
    again = split(shuffled, 6, dict(reversed(list(durations.items()))))
    assert [set(g) for g in again] == [set(g) for g in groups]


def test_split_balances_by_recorded_durations() -> None:
    ids = _ids(40)
    durations = {i: float(n % 7 + 1) for n, i in enumerate(ids)}
    groups = split(ids, 4, durations)
    loads = [sum(durations[i] for i in g) for g in groups]
    # LPT: no shard exceeds the mean load by more than the longest test
    assert max(loads) <= sum(loads) / 4 + max(durations.values())
    lone = split(["a", "b", "c"], 5, {})
    assert sorted(len(g) for g in lone) == [0, 0, 1, 1, 1]


def test_durations_files_in_pytest_splits_formats(tmp_path: Path) -> None:
    current = tmp_path / "new"
    current.write_text(json.dumps({"a": 1.5, "b": 2}))
    legacy = tmp_path / "old"
    legacy.write_text(json.dumps([["a", 1.5], ["b", 2]]))
    assert shards.read_durations(current) == shards.read_durations(legacy) == {"a": 1.5, "b": 2.0}
    assert shards.read_durations(tmp_path / "missing") == {}
    shards.write_durations(current, {"c": 0.25, "a": 3.0})
    assert shards.read_durations(current) == {"a": 3.0, "b": 2.0, "c": 0.25}
    (tmp_path / "bad").write_text("{not json")
    with pytest.raises(ShardError, match="durations file .*bad"):
        shards.read_durations(tmp_path / "bad")


def test_seed_streams_are_disjoint_between_shards_and_repeat_on_a_rerun() -> None:
    from conformance.campaign.fuzz import chunk_seed

    for profile, base in (("ci", 0), ("nightly", 12345), ("dev", 2**32 - 3)):
        streams = [[chunk_seed(profile, k, Shard(i, 16), base) for k in range(50)] for i in range(1, 17)]
        seen = [s for stream in streams for s in stream]
        assert len(set(seen)) == len(seen)
        assert streams == [[chunk_seed(profile, k, Shard(i, 16), base) for k in range(50)] for i in range(1, 17)]
    assert [chunk_seed("ci", k) for k in range(4)] == [0, 1, 2, 3]  # an unsharded ci campaign as before
    assert [chunk_seed("ci", k, Shard(2, 4)) for k in range(3)] == [1, 5, 9]
    assert chunk_seed("nightly", 0, Shard(1, 2), 7) != chunk_seed("dev", 0, Shard(1, 2), 7)


def _collect(args: list[str], cwd: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "BUILDKITE", "SLURM_", "JOB_COMPLETION"))}
    env.pop("PYTEST_CURRENT_TEST", None)
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.long
def test_the_plugin_runs_each_test_in_exactly_one_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The corpus property's tests (one per corpus entry) over 2 shards, one named by the option and
    one by $CONFORMANCE_SHARD, with recorded durations: disjoint, together every test, balanced."""
    suite = str(ROOT / "conformance" / "suite" / "test_corpus.py")
    base = [suite, "--conformance-kernel", "emulated", "--conformance-device", "cpu"]
    everything = _collect(base, tmp_path)
    assert len(everything) > 30
    durations = {node: (10.0 if n % 5 == 0 else 0.5) for n, node in enumerate(everything)}
    path = tmp_path / "durations.json"
    path.write_text(json.dumps(durations))
    first = _collect([*base, "--conformance-shard", "1/2", "--conformance-durations", str(path)], tmp_path)
    monkeypatch.setenv("CONFORMANCE_SHARD", "2/2")
    second = _collect([*base, "--conformance-durations", str(path)], tmp_path)
    assert set(first).isdisjoint(second)
    assert sorted(first + second) == sorted(everything)
    loads = [sum(durations[n] for n in part) for part in (first, second)]
    assert abs(loads[0] - loads[1]) <= max(durations.values())
