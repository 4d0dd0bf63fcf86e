"""A kernel that takes one configuration (one H, one has_invalid / return_lse pair, as an `isa:`
launch spec declares) runs the precondition and precision-probe properties within what it takes
instead of ending in Hypothesis Unsatisfiable; a kernel that takes nothing skips naming why; a
broad kernel still runs them with the flags they fix (has_invalid False; lse on for probes)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.judging.flag_support import ALL_FLAGS, supported_flags
from conformance.judging.target import Target
from conformance.suite.test_metamorphic import test_permuting_keys as permuting_keys
from conformance.suite.test_metamorphic import test_split_and_merge as split_and_merge
from conformance.suite.test_precision_probes import test_precision_probes as precision_probes
from conformance.suite.test_preconditions import test_precondition_violations as precondition_violations
from kernel.backend import Backend
from kernel.contract import CallInfo
from kernel.registry import resolve
from oracle.profiles import load_profile


def _run(prop, target: Target) -> None:  # type: ignore[no-untyped-def]
    """The property's body under @given again, a few derandomised examples (its own settings
    object is left alone)."""
    fresh = given(data=st.data())(prop.hypothesis.inner_test)
    settings(max_examples=6, database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))(fresh)(target=target)


def _target(narrow: tuple[bool, bool] | None, heads: tuple[int, ...] | None) -> tuple[Target, list[tuple[int, bool, bool]]]:
    """`emulated` declaring only `heads` and (has_invalid, return_lse) == narrow (None: all);
    returns the target and the list its calls append (H, has_invalid, return_lse) to."""
    base = resolve("emulated")
    calls: list[tuple[int, bool, bool]] = []

    def fn(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        calls.append((q.shape[1], has_invalid, return_lse))
        return base.fn(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)

    def extra(info: CallInfo) -> str:
        if narrow is not None and (info.has_invalid, info.return_lse) != narrow:
            return f"compiled for has_invalid={narrow[0]}, return_lse={narrow[1]}"
        return ""

    backend: Backend = dataclasses.replace(base, name="narrow", fn=fn, head_counts=heads, extra_support=extra)
    return Target("narrow", backend, torch.device("cpu"), load_profile(backend.profile)), calls


@pytest.mark.parametrize("prop", [precondition_violations, precision_probes], ids=["preconditions", "precision_probes"])
def test_one_configuration_kernel_draws_within_its_support(prop) -> None:  # type: ignore[no-untyped-def]
    target, calls = _target((True, True), (2,))
    assert supported_flags(target, 2) == ((True, True),)
    _run(prop, target)  # Unsatisfiable before: every draw had has_invalid False
    assert calls, "no example reached the kernel"
    assert set(calls) == {(2, True, True)}


@pytest.mark.parametrize("prop", [precondition_violations, precision_probes], ids=["preconditions", "precision_probes"])
def test_kernel_taking_no_flags_skips_naming_why(prop) -> None:  # type: ignore[no-untyped-def]
    target, calls = _target((True, True), (2,))
    target = dataclasses.replace(target, backend=dataclasses.replace(target.backend, extra_support=lambda info: "no flags at all here"))
    with pytest.raises(pytest.skip.Exception, match="takes no has_invalid / return_lse.*no flags at all here"):
        _run(prop, target)
    assert not calls


def test_broad_kernel_keeps_the_properties_flags() -> None:
    target, calls = _target(None, None)
    assert supported_flags(target, 5) == ALL_FLAGS
    _run(precondition_violations, target)
    assert calls and all(not inv for _, inv, _ in calls), "violating recipes fix has_invalid False"
    assert len({h for h, _, _ in calls}) > 1, "H still drawn over 1..16"
    calls.clear()
    _run(precision_probes, target)
    assert calls and set((inv, lse) for _, inv, lse in calls) == {(False, True)}, "probes keep their own flags"


@pytest.mark.parametrize("prop", [permuting_keys, split_and_merge], ids=["permuting_keys", "split_and_merge"])
def test_lse_property_skips_on_a_kernel_without_lse(prop) -> None:  # type: ignore[no-untyped-def]
    """The metamorphic properties that compare lse need a kernel that returns it: one compiled
    without skips naming that (Unsatisfiable before), one with it runs them within its flags."""
    target, calls = _target((False, False), (1,))
    with pytest.raises(pytest.skip.Exception, match="does not take return_lse=True at any H: compiled for has_invalid=False"):
        _run(prop, target)
    assert not calls
    target, calls = _target((True, True), (1,))
    _run(prop, target)
    assert calls and set(calls) == {(1, True, True)}
