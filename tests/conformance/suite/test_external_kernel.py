"""The conformance suite accepts any external `package.module:attr` kernel with a declared profile.

An external module is written into a temporary folder (not a package of this repository) and
the suite is run against its callables in a subprocess with that folder on PYTHONPATH:
- `good`: a plain wrapper around kernel.emulated.gfx950.run_emulated with `profile = "gfx950"`: passes;
- `broken`: the same with every output scaled by 1.25: fails, by the a-priori bound;
- `no_out`: a good wrapper without an `out=` parameter: the cases with out= (host validation of
  out, the preallocated-out corpus entry) are skipped (the suite reads the signature) and the
  rest passes;
- `anonymous`: a good wrapper with no `profile` attribute: without a profile option nothing runs
  and the reason names the missing profile and both remedies; with `--conformance-profile
  gfx950` it passes;
- `good` again, named by its file path (`/abs/folder/file.py:good`) with the folder off PYTHONPATH;
- `lax` (validates nothing) and `vague` (raises "bad call" for everything): host validation
  fails, each failure naming the bad input accepted or the error that does not name it.
Each run takes a few corpus entries, host validation and (gfx950 only) the bit-exact agreement
property under the ci profile, so the whole file takes some tens of seconds on a CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE = "external_sparse_mla_kernels"

EXTERNAL_MODULE = textwrap.dedent(
    '''
    """External kernels for the conformance suite (written by tests/conformance/suite/test_external_kernel.py)."""
    import torch

    from kernel.emulated.gfx950 import run_emulated


    def good(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
        return run_emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


    good.profile = "gfx950"


    def broken(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
        result, lse = good(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
        result.mul_(1.25)  # BUG: every output 25 % too large
        return result, lse


    broken.profile = "gfx950"


    def no_out(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False):
        return run_emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse)


    no_out.profile = "gfx950"


    def anonymous(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
        return run_emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


    def lax(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
        return torch.zeros(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16), None  # BUG: validates nothing


    lax.profile = "gfx950"


    def vague(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
        raise ValueError("bad call")  # BUG: refuses every call without saying why


    vague.profile = "gfx950"
    '''
)

CORPUS = [
    f"conformance/suite/test_corpus.py::test_corpus_entry[{name}]"
    for name in (
        "edge-single-key",
        "edge-empty-row",
        "edge-tile-129",
        "edge-padded-q-strides",
        "edge-preallocated-strided-out",
    )
]
HOST_VALIDATION = ["conformance/suite/test_host_validation.py"]
BIT_EXACT = ["conformance/suite/test_gfx950_agreement.py::test_bit_exact_agreement_with_emulated"]


@dataclass
class SuiteRun:
    """Outcome of one subprocess run of the suite: exit code, output and per-test outcomes."""

    returncode: int
    output: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # test -> reason


@pytest.fixture(scope="module")
def external_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("external")
    (folder / f"{MODULE}.py").write_text(EXTERNAL_MODULE, encoding="utf-8")
    return folder


def run_suite(folder: Path, attr: str, tests: list[str], *extra: str, kernel: str = "", on_path: bool = True) -> SuiteRun:
    """Run the given suite tests against `kernel` (default `MODULE:attr`) in a subprocess started
    in the repository (PYTHONPATH = folder + repo, or the repo alone when not `on_path`)."""
    junit = folder / f"junit-{attr}-{len(extra)}-{on_path}.xml"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_XDIST_", "CONFORMANCE_")) and k not in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")
    }
    env["PYTHONPATH"] = os.pathsep.join([*([str(folder)] if on_path else []), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CONFORMANCE_DIR"] = str(folder / "state")
    env.setdefault("OMP_NUM_THREADS", "1")
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "--conformance-no-capture",
        "--hypothesis-profile",
        "ci",
        "--conformance-kernel",
        kernel or f"{MODULE}:{attr}",
        f"--junitxml={junit}",
        *extra,
    ]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    run = SuiteRun(proc.returncode, proc.stdout + proc.stderr)
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            if case.find("failure") is not None or case.find("error") is not None:
                run.failed.append(name)
            elif (skip := case.find("skipped")) is not None:
                run.skipped[name] = skip.get("message", "")
            else:
                run.passed.append(name)
    return run


def test_external_kernel_with_declared_profile_passes(external_dir: Path) -> None:
    run = run_suite(external_dir, "good", CORPUS + HOST_VALIDATION + BIT_EXACT)
    assert run.returncode == 0, run.output[-3000:]
    assert not run.failed and len(run.passed) >= len(CORPUS) + 17 + 1, run.output[-3000:]
    assert any("bit_exact" in name for name in run.passed)  # the gfx950 property applies to it
    assert all("GPU" in reason for reason in run.skipped.values()), run.skipped  # only the device-mismatch case


def test_broken_external_kernel_fails(external_dir: Path) -> None:
    run = run_suite(external_dir, "broken", CORPUS, "-x")
    assert run.returncode == 1, run.output[-3000:]
    assert run.failed and not run.passed, run.output[-3000:]
    assert "outside the a-priori bound" in run.output


def test_external_kernel_without_out_skips_out_cases(external_dir: Path) -> None:
    run = run_suite(external_dir, "no_out", HOST_VALIDATION + [CORPUS[0], CORPUS[-1]])
    assert run.returncode == 0, run.output[-3000:]
    out_cases = {name: reason for name, reason in run.skipped.items() if "[out_" in name}
    assert len(out_cases) == 3 and all("takes no out=" in reason for reason in out_cases.values()), run.skipped
    strided_out = [reason for name, reason in run.skipped.items() if "preallocated-strided-out" in name]
    assert len(strided_out) == 1 and "does not accept out=" in strided_out[0], run.skipped
    assert not run.failed and len(run.passed) == 14 + 1, run.output[-3000:]  # the other validations and edge-single-key


def test_external_kernel_without_profile_gets_a_clear_reason(external_dir: Path) -> None:
    run = run_suite(external_dir, "anonymous", CORPUS[:2] + BIT_EXACT)
    # a usage error before any test: nothing runs, and one line says what is missing and how to give it
    assert run.returncode == 4 and not run.passed and not run.skipped, run.output[-3000:]
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR: conformance:")]
    assert len(errors) == 1, run.output[-3000:]
    assert "declares no numerics profile" in errors[0] and "`profile` attribute" in errors[0] and "profile" in errors[0], errors[0]


def test_external_kernel_with_profile_option_passes(external_dir: Path) -> None:
    run = run_suite(external_dir, "anonymous", CORPUS + BIT_EXACT, "--conformance-profile", "gfx950")
    assert run.returncode == 0, run.output[-3000:]
    assert not run.failed and len(run.passed) == len(CORPUS) + 1, run.output[-3000:]


def test_kernel_given_as_a_file_path_passes(external_dir: Path) -> None:
    """`--conformance-kernel /abs/path/file.py:good`, the file's folder not on PYTHONPATH."""
    spec = f"{external_dir / MODULE}.py:good"
    run = run_suite(external_dir, "good", CORPUS[:2], kernel=spec, on_path=False)
    assert run.returncode == 0 and len(run.passed) == 2 and not run.failed, run.output[-3000:]


def test_accepted_bad_input_is_named_with_the_expected_error(external_dir: Path) -> None:
    run = run_suite(external_dir, "lax", HOST_VALIDATION, "-k", "q_float32 or kv_int8 or q_17_heads")
    assert run.returncode == 1 and len(run.failed) == 3, run.output[-3000:]
    assert "DID NOT RAISE" not in run.output
    for line in (
        "contract violation: a bad q is accepted (q of dtype float32 where the contract takes bf16; the call returned, "
        "expected an error naming 'q')",
        "contract violation: a bad kv_cache is accepted (kv_cache of dtype int8 where the contract takes uint8; the call returned, "
        "expected an error naming 'kv_cache')",
        "contract violation: a bad head count is accepted (q with 17 heads where the contract takes 1 to 16; the call returned, "
        "expected an error naming 'h')",
    ):
        assert line in run.output, run.output[-3000:]


def test_error_that_does_not_name_the_bad_input_says_so(external_dir: Path) -> None:
    run = run_suite(external_dir, "vague", HOST_VALIDATION, "-k", "indptr_int64")
    assert run.returncode == 1 and len(run.failed) == 1, run.output[-3000:]
    expected = (
        "contract violation: the error for a bad indptr does not name it (indptr of dtype int64 where the contract takes int32; "
        "expected an error naming 'indptr', got ValueError: bad call)"
    )
    assert expected in run.output, run.output[-3000:]
