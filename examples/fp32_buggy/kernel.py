"""The float32 reference kernel with one deliberate bug: lse is returned in log2 units.

Many attention kernels keep the log-sum-exp in base 2 internally (they compute exp2); the
contract asks for the natural log. Run the suite against it to see what a failure looks like
(README.md in this folder shows the output):

    pytest --pyargs conformance --conformance-kernel examples/fp32_buggy/kernel.py:fp32_buggy -n auto
"""

from __future__ import annotations

import math

from examples.fp32_reference.kernel import PROFILE, fp32_reference


def fp32_buggy(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    out, lse = fp32_reference(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if lse is not None:
        lse = lse / math.log(2.0)  # BUG: log2(sum exp(s)); the contract's lse is the natural log
    return out, lse


fp32_buggy.profile = PROFILE
fp32_buggy.devices = ("cpu", "cuda")
