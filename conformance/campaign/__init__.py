"""Campaigns outside pytest: the time-budgeted fuzz search (`fuzz`), as a library under the
command line's `python -m conformance fuzz`."""
