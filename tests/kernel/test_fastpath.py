"""kernel.fastpath: the one mechanism behind the fast paths (variants tried in order, eligibility
looked up at each call, each self-check run once per device and variant, a failing one warning
once), the one setting CONFORMANCE_FAST_PATHS and its one-line errors, the old variables refused
with their replacement, and every built-in path registered; fake paths on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from kernel import fastpath
from kernel.fastpath import FastPath

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two fake path names, a clean setting and clean caches; the registry restored afterwards."""
    monkeypatch.setitem(fastpath.PATHS, "test.one", "a fake path")
    monkeypatch.setitem(fastpath.PATHS, "test.two", "a fake path that needs test.one")
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    for old in fastpath.OLD_SETTINGS:
        monkeypatch.delenv(old, raising=False)
    saved = fastpath.registered()
    fastpath.forget()
    yield
    fastpath._REGISTRY.clear()
    fastpath._REGISTRY.update(saved)
    fastpath.forget()


class Checks:
    """A self-check recording its calls: `results[variant]` is True, False or an exception to raise."""

    def __init__(self, **results: object) -> None:
        self.results = results
        self.calls: list[tuple[str, str]] = []

    def __call__(self, device: torch.device, variant: str) -> bool:
        self.calls.append((str(device), variant))
        result = self.results[variant]
        if isinstance(result, Exception):
            raise result
        return bool(result)


def always(device: torch.device, variant: str) -> str:
    return ""


def register(checks: Checks, eligible: Callable[[torch.device, str], str] = always, **kw: object) -> None:
    fastpath.register(FastPath("test.one", ("a", "b"), checks, eligible, **kw))  # type: ignore[arg-type]


def test_the_first_eligible_variant_that_passes_is_chosen_and_each_check_runs_once(fakes: None) -> None:
    checks = Checks(a=False, b=True, t=True)
    register(checks, opt_in=("t",))
    with pytest.warns(UserWarning, match=r"fast path test\.one \(a\) differs from the torch path"):
        assert fastpath.choose("test.one", CPU) == "b"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failing check warns once
        assert fastpath.choose("test.one", CPU) == "b"
        assert fastpath.choose("test.one", "cpu") == "b"
    assert checks.calls == [("cpu", "a"), ("cpu", "b")]
    assert fastpath.chosen()["test.one"] == {"cpu": "b"}
    assert fastpath.checked()["test.one"] == {"cpu": {"a": False, "b": True}}
    assert fastpath.self_check("test.one", CPU, "a") is False and checks.calls[-1] == ("cpu", "a")  # run again, not cached


def test_a_raising_check_warns_with_its_error_and_none_passing_gives_the_torch_path(fakes: None) -> None:
    register(Checks(a=RuntimeError("no kernel image"), b=False))
    with pytest.warns(UserWarning) as caught:
        assert fastpath.choose("test.one", CPU) is None
    texts = [str(w.message) for w in caught]
    assert any("(a) unavailable on cpu (RuntimeError: no kernel image)" in t for t in texts), texts
    assert any("(b) differs" in t for t in texts), texts
    assert fastpath.self_check("test.one", CPU, "a") is False


def test_eligibility_is_looked_up_at_each_call(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"ok": False}
    checks = Checks(a=True, b=True)
    register(checks, lambda device, variant: "" if state["ok"] and variant == "b" else "not here")
    assert fastpath.choose("test.one", CPU) is None and checks.calls == []  # ineligible: silent, no check
    state["ok"] = True
    assert fastpath.choose("test.one", CPU) == "b"
    state["ok"] = False
    assert fastpath.choose("test.one", CPU) is None  # the cached check does not outlive eligibility


def test_the_setting_turns_paths_off_picks_opt_in_and_named_variants(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = Checks(a=True, b=True, t=True, u=True)
    register(checks, lambda device, variant: "" if variant != "u" else "u cannot run here", opt_in=("t", "u"))
    fastpath.register(FastPath("test.two", ("x",), Checks(x=True), always, needs=("test.one",)))
    for value, want in (("auto", "a"), ("test.one=auto", "a"), ("test.one=triton", "t"), ("test.one=b", "b"), ("test.one=off", None)):
        monkeypatch.setenv(fastpath.SETTING, value)
        assert fastpath.choose("test.one", CPU) == want, value
    monkeypatch.setenv(fastpath.SETTING, "off")
    assert fastpath.choose("test.one", CPU) is None and fastpath.choose("test.two", CPU) is None
    monkeypatch.setenv(fastpath.SETTING, "off,test.two=auto")
    assert fastpath.choose("test.two", CPU) is None  # it needs test.one, which the setting turns off
    monkeypatch.setenv(fastpath.SETTING, " test.one = a , ")
    assert fastpath.choose("test.one", CPU) == "a" and fastpath.choose("test.two", CPU) == "x"
    monkeypatch.setenv(fastpath.SETTING, "test.one=u")
    with pytest.warns(UserWarning, match="test.one=u cannot run on cpu: u cannot run here"):
        assert fastpath.choose("test.one", CPU) is None  # a named variant that cannot run says so
    assert ("cpu", "u") not in checks.calls


@pytest.mark.parametrize(
    "value, message",
    [
        ("test.one=fast", r"test\.one='fast': use one of auto, off, a, b"),
        ("nope=off", r"unknown fast path 'nope' in 'nope=off'"),
        ("test.one", r"entry 'test.one' is not auto, off or PATH=VALUE"),
        ("test.one=", r"entry 'test.one=' has no value"),
        ("test.one=a,off", r"entry 'off' sets every path: put it first"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_entry(fakes: None, monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    register(Checks(a=True, b=True))
    monkeypatch.setenv(fastpath.SETTING, value)
    with pytest.raises(ValueError, match=message) as info:
        fastpath.choose("test.one", CPU)
    assert "\n" not in str(info.value) and fastpath.SETTING in str(info.value)


@pytest.mark.parametrize(
    "old, value, replacement",
    [
        ("BF16_FUSED_DECODE", "0", "peers.bf16-keys=off"),
        ("EMULATED_TRITON_DECODE", "0", "emulated.decode=off"),
        ("EMULATED_TRITON_STATE", "0", "emulated.state=off"),
        ("EMULATED_TRITON_PV", "1", "emulated.pv=triton"),
        ("EMULATED_TRITON_PV", "0", "emulated.pv=off"),
        ("EMULATED_TRITON_QK", "1", "emulated.qk=triton"),
        ("ORACLE_FUSED_DECODE", "0", "oracle.key-decode=off"),
        ("ORACLE_FUSED_PRODUCTS", "cuda", "oracle.products=dmma"),
        ("ORACLE_FUSED_PRODUCTS", "triton", "oracle.products=triton"),
        ("ORACLE_FUSED_PRODUCTS", "auto", "oracle.products=auto"),
    ],
)
def test_an_old_variable_is_refused_naming_its_replacement(
    fakes: None, monkeypatch: pytest.MonkeyPatch, old: str, value: str, replacement: str
) -> None:
    register(Checks(a=True, b=True))
    monkeypatch.setenv(old, value)
    with pytest.raises(ValueError) as info:
        fastpath.choose("test.one", CPU)
    assert str(info.value) == f"{old}={value} is no longer read: set {fastpath.SETTING}={replacement} instead (and unset {old})"


def test_registering_checks_the_names(fakes: None) -> None:
    with pytest.raises(ValueError, match="unknown fast path 'test.three'"):
        fastpath.register(FastPath("test.three", ("a",), Checks(a=True), always))
    with pytest.raises(ValueError, match="distinct and non-empty"):
        fastpath.register(FastPath("test.one", ("a",), Checks(a=True), always, opt_in=("a",)))
    with pytest.raises(ValueError, match="needs unknown paths"):
        fastpath.register(FastPath("test.one", ("a",), Checks(a=True), always, needs=("nope",)))
    with pytest.raises(ValueError, match="'test.two' is not registered"):
        fastpath.choose("test.two", CPU)


def test_same_bits_matches_nan_with_nan_and_nothing_else() -> None:
    a = torch.tensor([1.0, float("nan"), -0.0, float("inf")], dtype=torch.float64)
    assert fastpath.same_bits(a, a.clone())
    assert fastpath.same_bits(a, torch.tensor([1.0, -float("nan"), -0.0, float("inf")], dtype=torch.float64))
    assert not fastpath.same_bits(a, torch.tensor([1.0, float("nan"), 0.0, float("inf")], dtype=torch.float64))  # -0 vs +0
    b = a.float().clone()
    b.view(torch.int32)[0] += 1  # one ulp
    assert not fastpath.same_bits(a.float(), b)
    assert not fastpath.same_bits(a, torch.tensor([1.0, 2.0, -0.0, float("inf")], dtype=torch.float64))


def test_check_records_cover_every_code_scale_class_and_rope_pattern() -> None:
    flat, slots = fastpath.check_records(CPU)
    assert flat.shape == (1024, 656) and flat.dtype == torch.uint8
    assert all(torch.unique(flat[:, 128 * g : 128 * (g + 1)]).numel() == 256 for g in range(4))
    scales = flat[:, 512:528].contiguous().view(torch.int32)
    assert torch.unique(scales).numel() == len(fastpath.CHECK_SCALES)
    assert torch.unique(flat[:, 528:].contiguous().view(torch.int16)).numel() == 1 << 16
    assert bool((slots == -1).any()) and torch.equal(torch.sort(slots[slots >= 0]).values, torch.arange(1024))


def _clean_env() -> dict[str, str]:
    """This process's environment without the setting, the old variables and Triton's interpreter."""
    drop = {fastpath.SETTING, "TRITON_INTERPRET", *fastpath.OLD_SETTINGS}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONPATH": str(ROOT)}


def test_every_path_registers_and_none_runs_on_this_cpu() -> None:
    """A fresh process importing the owners registers exactly PATHS; on a CPU without Triton's
    interpreter every path takes the torch operations, each saying why; `off` turns all off."""
    code = (
        "import torch, kernel.emulated.gfx950, kernel.peers.bf16_key_decode, oracle.rows, oracle.fused_products\n"
        "from kernel import fastpath\n"
        "assert sorted(fastpath.registered()) == sorted(fastpath.PATHS), sorted(fastpath.registered())\n"
        "cpu = torch.device('cpu')\n"
        "for name, path in fastpath.registered().items():\n"
        "    assert fastpath.choose(name, cpu) is None, name\n"
        "    assert all(path.eligible(cpu, v) for v in path.variants + path.opt_in), name\n"
        "print('ok')\n"
    )
    env = {**_clean_env(), fastpath.SETTING: "auto"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_cli_lists_every_path_and_refuses_a_bad_setting() -> None:
    env = _clean_env()
    command = [sys.executable, "-m", "conformance", "fast-paths", "--device", "cpu"]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = [line.split()[0] for line in done.stdout.splitlines()[1:] if line and not line.startswith(" ")]
    assert sorted(listed) == sorted(fastpath.PATHS)
    bad = subprocess.run(command, env={**env, "EMULATED_TRITON_PV": "0"}, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "CONFORMANCE_FAST_PATHS=emulated.pv=off" in bad.stderr
