"""The name a suite session files its pending entries under is the kernel it judges: the
--conformance-kernel spec, else this machine's default kernel by name (the header's "saved to"
folder and the entries' folder are one)."""

from __future__ import annotations

from types import SimpleNamespace

from conformance.durability.state import kernel_pending_dir
from conformance.suite import options
from kernel.registry import default_kernel_name


def _config(**values: object) -> object:
    return SimpleNamespace(getoption=lambda dest, default=None: values.get(dest, default))


def test_a_named_kernel_is_its_spec() -> None:
    config = _config(**{options.dest(options.KERNEL): "my_mod:attention"})
    assert options.kernel_name(config) == "my_mod:attention"  # type: ignore[arg-type]


def test_no_kernel_named_is_the_machines_default_by_name() -> None:
    name = options.kernel_name(_config())  # type: ignore[arg-type]
    assert name == default_kernel_name() and name in ("emulated", "flydsl")
    assert kernel_pending_dir(name).name == name  # not a folder called "default"
