"""The example kernels of examples/ run in CI: the float32 reference conforms, the buggy one fails
(lse in log2) with the lse named, on a few corpus entries through the suite's differential check."""

from __future__ import annotations

import pytest

from conformance.judging.checks import differential
from conformance.judging.target import build_target
from conformance.records.corpus import CORPUS_DIR, load_entry

ENTRIES = ("edge-single-key", "edge-tile-129", "edge-paged-cache", "edge-empty-row", "edge-duplicate-keys")


@pytest.mark.parametrize("name", ENTRIES)
def test_reference_example_conforms(name: str) -> None:
    target = build_target("examples.fp32_reference.kernel:fp32_reference", device="cpu")
    assert target.profile.name == "example-fp32-reference"
    differential(target, load_entry(CORPUS_DIR / f"{name}.json").recipe, use_target=False)


def test_buggy_example_fails_on_lse() -> None:
    target = build_target("examples.fp32_buggy.kernel:fp32_buggy", device="cpu")
    with pytest.raises(AssertionError, match=r"lse values exceed the bound") as info:
        differential(target, load_entry(CORPUS_DIR / "edge-single-key.json").recipe, use_target=False)
    assert "out elements exceed" not in str(info.value)
