"""Kernels under test and their contract.

`kernel.record` and `kernel.fp8`: the fp8_ds_mla record codec. `kernel.contract`: the call
contract and its host validation. `kernel.backend`: `Backend` and `BackendUnavailable`.
`kernel.backends`: the built-in implementations. `kernel.registry`: `resolve(name)`, the
catalogue that imports the backends (nothing else imports them by name).
"""
