"""Root conftest: the conformance plugin (options, profiles, device pinning) for every test."""

pytest_plugins = ["conformance.suite.plugin"]
