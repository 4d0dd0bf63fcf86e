"""Bit-for-bit snapshots: the oracle, the bound and the emulated kernel over fixed problems
(`oracle`), and materialize's tensors over fixed and drawn recipes (`materialize`); the fixed
problems both use (`cases`). The command line: `python -m conformance snapshot`."""
