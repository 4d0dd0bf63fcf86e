"""FlashMLA's own outputs on two corpus entries at the latent cap, recorded on an H200 (torch
2.11+cu130, sgl-flash-mla 1.0.0), judged on the CPU: they conform under the shipped profiles, and
profiles without the build and schedule facts (subnormals preserved, no split-KV merge) fail them
as a profile too tight, with the rung that explains each.
A soundness regression without a GPU: the bound of `bf16-q-bf16-p` / `flashmla-sparse-prefill`
must keep admitting what the real kernel returned.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conformance.judging.harness import judge
from conformance.judging.triage import LADDER, PROFILE, triage
from oracle.profile_schema import SplitModel
from oracle.profiles import load_profile
from strategies.materialize import materialize
from strategies.recipe import Recipe

RECORDED = Path(__file__).with_name("data") / "flashmla_recorded.pt"
PROFILE_OF = {"flashmla": "bf16-q-bf16-p", "flashmla-prefill": "flashmla-sparse-prefill"}
# the rung that explains each entry under the old reading of the profile
RUNG_OF = {"flashmla-decode-max-latent-one-hot": LADDER[2].name, "flashmla-max-latent-flat-softmax": LADDER[0].name}


def _cases() -> list[str]:
    return sorted(torch.load(RECORDED, weights_only=True)) if RECORDED.is_file() else []


@pytest.mark.parametrize("key", _cases())
def test_recorded_flashmla_output_conforms_and_old_profile_is_class_2(key: str) -> None:
    saved = torch.load(RECORDED, weights_only=True)[key]
    entry, kernel = key.split(":")
    problem = materialize(Recipe.from_json_dict(json.loads(saved["recipe"])), "cpu")
    out, lse = saved["out"], saved["lse"]
    profile = load_profile(PROFILE_OF[kernel])
    assert judge(problem, out, lse, profile).ok
    old = dataclasses.replace(profile, subnormals="preserve", split=SplitModel(rows="never"))
    judgement = judge(problem, out, lse, old)
    if judgement.ok:  # the prefill kernel never splits: only the flush entry fails the old reading
        assert RUNG_OF[entry] != LADDER[0].name
        return
    result = triage(problem, out, lse, old, judgement)
    assert result.finding.kind == PROFILE and result.rungs == (RUNG_OF[entry],), result


def test_recording_is_present() -> None:
    assert len(_cases()) == 3, f"{RECORDED} holds the three recorded FlashMLA calls"
