"""Kernels under test and their contract: record codec, contract and registry, backends."""

from kernel.contract import CallInfo, ContractError, KernelFn, Support, validate_call
from kernel.registry import Backend, BackendUnavailable, default_kernel_name, resolve

__all__ = [
    "Backend",
    "BackendUnavailable",
    "CallInfo",
    "ContractError",
    "KernelFn",
    "Support",
    "default_kernel_name",
    "resolve",
    "validate_call",
]
