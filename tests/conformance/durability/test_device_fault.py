"""conformance.durability.device_fault: the driver's errors are device faults, ordinary errors are
not, and a fault is found through the exceptions that wrap it (a judging step's finding raised
`from` the kernel's exception)."""

from __future__ import annotations

from conformance.durability.device_fault import describe, fault_in, is_device_fault

ASSERT = "CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."


def test_the_drivers_errors_are_faults_and_others_are_not() -> None:
    assert is_device_fault(RuntimeError(ASSERT)) and is_device_fault(RuntimeError("HIP error: an illegal memory access was encountered"))
    assert not is_device_fault(RuntimeError("shape mismatch")) and not is_device_fault(ValueError(ASSERT))
    assert describe(RuntimeError(ASSERT)) == "RuntimeError: CUDA error: device-side assert triggered"


def test_a_fault_is_found_through_what_wraps_it() -> None:
    fault = RuntimeError(ASSERT)
    try:
        try:
            raise fault
        except RuntimeError as err:
            raise AssertionError("contract violation: a valid call raised RuntimeError") from err
    except AssertionError as wrapped:
        assert fault_in(wrapped) is fault
    try:
        try:
            raise fault
        except RuntimeError:
            raise KeyError("raised while handling it") from None
    except KeyError as unrelated:
        assert fault_in(unrelated) is None  # `from None`: not caused by the fault
    assert fault_in(ValueError("no fault")) is None and fault_in(None) is None
