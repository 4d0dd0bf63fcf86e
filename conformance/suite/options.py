"""The suite's pytest options, every one prefixed `--conformance-` (as Hypothesis prefixes its own).

The plugin is installed for every pytest session of the environment, so an unprefixed option
(`--kernel`, `--profile`, `--device`) would collide with other plugins (pytest-profiling defines
`--profile`) and with projects' own conftest files. Each option has an explicit `dest` under the
same prefix, so no other plugin's destination can clash either. The names are written here once;
the plugin, its session hooks and the printed rerun commands read them from here.
"""

from __future__ import annotations

import argparse

import pytest

KERNEL = "--conformance-kernel"
PROFILE = "--conformance-profile"
DEVICE = "--conformance-device"
WORKERS_PER_GPU = "--conformance-workers-per-gpu"
NO_CAPTURE = "--conformance-no-capture"
CALL_TIMEOUT = "--conformance-call-timeout"
TRACEBACKS = "--conformance-tracebacks"
SHARD = "--conformance-shard"
SHARED_STORE = "--conformance-shared-store"
REQUIRE_SHARED_STORE = "--conformance-require-shared-store"
DURATIONS = "--conformance-durations"
STORE_DURATIONS = "--conformance-store-durations"

#: the options that choose what runs (carried into every printed rerun command)
TARGET_OPTIONS = (KERNEL, PROFILE, DEVICE)


def dest(option: str) -> str:
    """The argparse destination of one of this module's options."""
    return option.removeprefix("--").replace("-", "_")


def add_options(parser: pytest.Parser, default_call_timeout_s: float) -> None:
    """Register the suite's options in their own group."""
    group = parser.getgroup("conformance", "sparse MLA conformance suite")

    def add(option: str, **kwargs: object) -> None:
        group.addoption(option, dest=dest(option), **kwargs)

    add(
        KERNEL,
        default=None,
        metavar="NAME",
        help="kernel under test: a built-in name (python -m conformance fuzz --help lists them), package.module:attr, "
        "or path/to/file.py:attr (default: flydsl on gfx950, else emulated)",
    )
    add(PROFILE, default=None, metavar="NAME", help="numerics profile of the kernel (overrides what it declares)")
    add(DEVICE, default=None, metavar="DEV", help="device to run on: cpu or cuda (default: cuda when available)")
    add(WORKERS_PER_GPU, type=int, default=1, metavar="N", help="with -n auto on a GPU machine: workers per GPU")
    add(
        NO_CAPTURE,
        action="store_true",
        help="do not save failing recipes to the pending folder (.conformance/pending/<kernel>/)",
    )
    add(
        CALL_TIMEOUT,
        type=_seconds,
        default=None,
        metavar="S",
        help=f"seconds one kernel call may take (default {default_call_timeout_s:g}; 0: no limit)",
    )
    add(
        TRACEBACKS,
        action="store_true",
        help="print pytest's own report of every failing test (tracebacks, Hypothesis output) instead of one report per distinct failure",
    )
    add(
        SHARD,
        type=_shard,
        default=None,
        metavar="I/N",
        help="run shard I of N (1 <= I <= N) of the collected tests, split by recorded durations (--conformance-durations); "
        "default: $CONFORMANCE_SHARD, else the CI system's variables (Buildkite, Slurm, Kubernetes: docs/fleet.md)",
    )
    add(
        DURATIONS,
        default=None,
        metavar="PATH",
        help="test durations in pytest-split's format that balance the shards (default .test_durations in the folder pytest "
        "was started in; tests without one count as the mean)",
    )
    add(
        STORE_DURATIONS,
        action="store_true",
        help="merge this session's test durations into the durations file (--conformance-durations) at the end",
    )
    add(
        SHARED_STORE,
        default=None,
        metavar="URL",
        help="the fleet's shared store (redis://host:port/db, rediss://..., unix:///path): examples under --hypothesis-profile "
        "fleet (read only under dev), failures pushed to its inbox under fleet (default: $CONFORMANCE_SHARED_STORE)",
    )
    add(
        REQUIRE_SHARED_STORE,
        action="store_true",
        help="a shared store that is missing or unreachable fails the session (without it the run uses local state and says so)",
    )


def get(config: pytest.Config, option: str) -> object:
    """The value of one of this module's options (None where the plugin's options are not registered)."""
    return config.getoption(dest(option), None)


def kernel_name(config: pytest.Config) -> str:
    """The session's kernel spec: --conformance-kernel, else this machine's default kernel's name
    (kernel.registry.default_kernel_name): the name its pending entries are filed under."""
    named = get(config, KERNEL)
    if named:
        return str(named)
    from kernel.registry import default_kernel_name

    return default_kernel_name()


def _shard(text: str) -> object:
    from conformance.fleet.shards import ShardError, parse_shard

    try:
        return parse_shard(text, SHARD)
    except ShardError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text}")
    return value
