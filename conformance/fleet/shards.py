"""Shards: which part of the work this runner does, from `--shard i/n` or the CI system's variables.

Numbering: `i/n` with i from 1 to n (as pytest-split's `--group`, and as a human reads "shard
2 of 4"). The CI systems' own variables are read with their own conventions and turned into it:
- `CONFORMANCE_SHARD=i/n`: any system (a GitHub Actions matrix has no standard variable: pass
  `--shard ${{ matrix.shard }}/N` or set this);
- Buildkite `parallelism`: BUILDKITE_PARALLEL_JOB (0-based) of BUILDKITE_PARALLEL_JOB_COUNT;
- a Slurm job array: SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT, counted from
  SLURM_ARRAY_TASK_MIN in steps of SLURM_ARRAY_TASK_STEP (default 1): `--array=0-15`,
  `--array=1-16` and `--array=0-30:2` all give 1/16 .. 16/16;
- a Kubernetes Indexed Job: JOB_COMPLETION_INDEX (0-based); Kubernetes exposes no count, so the
  Job sets CONFORMANCE_SHARD_COUNT to its `completions` (docs/fleet.md).
An explicit option wins over CONFORMANCE_SHARD, which wins over the CI variables (Buildkite,
then Slurm, then Kubernetes). A variable that is set but unusable is a ShardError naming it.

What a shard runs:
- pytest: the collected tests split by recorded durations (a file in pytest-split's format:
  a JSON object {node id: seconds}, or its older list of [node id, seconds] pairs), longest
  first onto the least loaded shard (LPT, pytest-split's `least_duration`); a test without a
  recorded duration counts as the mean of those recorded (1 s when none are). Ties break by node
  id and by shard number, so every process of every runner computes the same split: the shards
  are disjoint, cover every test, and a rerun of a shard runs the same tests.
- fuzz: a seed stream per shard (`chunk_seed`): chunk k of shard i/n has seed
  base + offset(profile) + k * n + (i - 1) (mod 2^32): disjoint between the shards of one
  campaign, the same on a rerun; the ci profile's offset and default base are 0, so 1/1 keeps the
  seeds 0, 1, 2, ...
"""

from __future__ import annotations

import heapq
import json
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SHARD_ENV = "CONFORMANCE_SHARD"
SHARD_COUNT_ENV = "CONFORMANCE_SHARD_COUNT"  # the count of a Kubernetes Indexed Job (its completions)
DEFAULT_DURATIONS = ".test_durations"  # pytest-split's file name


class ShardError(ValueError):
    """A shard that cannot be used; the message names the option or variable and the problem."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`; `source` says where it came from."""

    index: int = 1
    count: int = 1
    source: str = "default"

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise ShardError(f"shard {self.index}/{self.count}: expected i/n with 1 <= i <= n")

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def describe(self) -> str:
        """`shard 2/4 (from BUILDKITE_PARALLEL_JOB=1 of 4)`, or `unsharded`."""
        if not self.sharded:
            return "unsharded (1/1)"
        return f"shard {self} ({self.source})"


UNSHARDED = Shard()


def parse_shard(text: str, source: str = "--shard") -> Shard:
    """`i/n` -> Shard; ShardError naming `source` when it is not of that form."""
    index, sep, count = str(text).strip().partition("/")
    try:
        if not sep:
            raise ValueError
        i, n = int(index), int(count)
    except ValueError:
        raise ShardError(f"{source}: expected i/n (shard i of n, 1 <= i <= n), got {text!r}") from None
    if n < 1 or not 1 <= i <= n:
        raise ShardError(f"{source}: expected i/n with 1 <= i <= n, got {text!r}")
    return Shard(i, n, source)


def _int(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name, "")
    try:
        return int(raw)
    except ValueError:
        raise ShardError(f"{name}={raw!r} is not an integer") from None


def from_environment(env: Mapping[str, str] | None = None) -> Shard | None:
    """The shard the environment names (see the module docstring), or None when it names none."""
    env = os.environ if env is None else env
    if env.get(SHARD_ENV):
        return parse_shard(env[SHARD_ENV], f"${SHARD_ENV}")
    if env.get("BUILDKITE_PARALLEL_JOB_COUNT") or env.get("BUILDKITE_PARALLEL_JOB"):
        job, count = _int(env, "BUILDKITE_PARALLEL_JOB"), _int(env, "BUILDKITE_PARALLEL_JOB_COUNT")
        if count < 1 or not 0 <= job < count:
            raise ShardError(f"BUILDKITE_PARALLEL_JOB={job} of BUILDKITE_PARALLEL_JOB_COUNT={count}: expected 0 <= job < count")
        return Shard(job + 1, count, f"BUILDKITE_PARALLEL_JOB={job} of {count}")
    if env.get("SLURM_ARRAY_TASK_ID"):
        task, count = _int(env, "SLURM_ARRAY_TASK_ID"), _int(env, "SLURM_ARRAY_TASK_COUNT")
        low = _int(env, "SLURM_ARRAY_TASK_MIN") if env.get("SLURM_ARRAY_TASK_MIN") else 0
        step = _int(env, "SLURM_ARRAY_TASK_STEP") if env.get("SLURM_ARRAY_TASK_STEP") else 1
        offset, rest = divmod(task - low, step) if step > 0 else (-1, 1)
        if count < 1 or rest or not 0 <= offset < count:
            raise ShardError(
                f"SLURM_ARRAY_TASK_ID={task} is not one of the {count} tasks from SLURM_ARRAY_TASK_MIN={low} in steps of {step}"
            )
        return Shard(offset + 1, count, f"SLURM_ARRAY_TASK_ID={task} of {count} from {low}")
    if env.get("JOB_COMPLETION_INDEX"):
        index = _int(env, "JOB_COMPLETION_INDEX")
        if not env.get(SHARD_COUNT_ENV):
            raise ShardError(
                f"JOB_COMPLETION_INDEX={index} is set but {SHARD_COUNT_ENV} is not: set it to the Job's completions (docs/fleet.md)"
            )
        count = _int(env, SHARD_COUNT_ENV)
        if count < 1 or not 0 <= index < count:
            raise ShardError(f"JOB_COMPLETION_INDEX={index} of {SHARD_COUNT_ENV}={count}: expected 0 <= index < count")
        return Shard(index + 1, count, f"JOB_COMPLETION_INDEX={index} of {SHARD_COUNT_ENV}={count}")
    return None


def resolve(option: str | Shard | None, env: Mapping[str, str] | None = None) -> Shard:
    """The shard of this process: the option (text or Shard) when given, else the environment's, else 1/1."""
    if isinstance(option, Shard):
        return option
    if option:
        return parse_shard(option)
    return from_environment(env) or UNSHARDED


# ---------------------------------------------------------------------------------------------
# pytest: the durations-balanced split


def read_durations(path: Path) -> dict[str, float]:
    """Recorded durations {node id: seconds} from a file in pytest-split's format; {} when the
    file does not exist. ShardError naming the file when it cannot be read or parsed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as err:
        raise ShardError(f"durations file {path}: cannot read ({getattr(err, 'strerror', None) or err})") from None
    try:
        data = json.loads(text)
        pairs = data.items() if isinstance(data, dict) else data
        found = {str(k): float(v) for k, v in pairs}
    except (ValueError, TypeError) as err:
        raise ShardError(f"durations file {path}: expected {{node id: seconds}} or [[node id, seconds], ...] ({err})") from None
    return {k: v for k, v in found.items() if v >= 0}


def write_durations(path: Path, measured: Mapping[str, float]) -> Path:
    """Merge `measured` {node id: seconds} into the durations file at `path` (atomic; the ids
    not measured keep their recorded value); returns the path."""
    from conformance.durability.wal import atomic_write_text

    merged = {**read_durations(path), **{k: round(float(v), 4) for k, v in measured.items()}}
    atomic_write_text(Path(path), json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
    return Path(path)


def split(ids: Sequence[str], count: int, durations: Mapping[str, float]) -> list[list[str]]:
    """`ids` split into `count` groups by LPT over their durations (module docstring); each group
    keeps the order of `ids`. Deterministic: the same ids and durations give the same groups."""
    if count < 1:
        raise ShardError(f"cannot split into {count} shards")
    known = [durations[i] for i in ids if i in durations]
    default = sum(known) / len(known) if known else 1.0
    order = {node: n for n, node in enumerate(ids)}
    weighted = sorted(((durations.get(i, default), i) for i in dict.fromkeys(ids)), key=lambda p: (-p[0], p[1]))
    heap = [(0.0, g) for g in range(count)]
    groups: list[list[str]] = [[] for _ in range(count)]
    for seconds, node in weighted:
        load, g = heapq.heappop(heap)
        groups[g].append(node)
        heapq.heappush(heap, (load + seconds, g))
    return [sorted(group, key=order.__getitem__) for group in groups]


def shard_seconds(ids: Sequence[str], durations: Mapping[str, float]) -> float:
    """The recorded seconds of `ids` (unrecorded ones at the mean, as `split` counts them)."""
    known = [durations[i] for i in ids if i in durations]
    default = sum(known) / len(known) if known else 1.0
    return sum(durations.get(i, default) for i in ids)


# ---------------------------------------------------------------------------------------------
# fuzz: the seed streams


def profile_offset(hypothesis_profile: str) -> int:
    """The seed offset of a Hypothesis profile: 0 for ci, a fixed 32-bit number for the others
    (so campaigns of two profiles with one base do not start on the same seeds)."""
    return 0 if hypothesis_profile == "ci" else zlib.crc32(hypothesis_profile.encode())


def chunk_seed(hypothesis_profile: str, chunk: int, shard: Shard, base: int) -> int:
    """The Hypothesis seed of chunk `chunk` (from 0) of `shard` in a campaign of seed base `base`:
    (base + profile_offset + chunk * n + i - 1) mod 2^32 (module docstring)."""
    return (base + profile_offset(hypothesis_profile) + chunk * shard.count + shard.index - 1) % (1 << 32)
