"""The project's own tests group their xdist work (FlyDSL compile groups, the mutation score run)
with `xdist_group` marks: with `-n`, they are scheduled `--dist loadgroup` unless told otherwise.
(The conformance suite itself runs `--dist load`: see conformance.suite.plugin.) Each xdist worker
takes its share of the cores as torch threads (conformance.suite.threads), as suite workers do."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", "no") in ("no", "load"):
        option.dist = "loadgroup"


def pytest_configure(config: pytest.Config) -> None:
    from conformance.suite.threads import share_cores_among_workers

    share_cores_among_workers()
