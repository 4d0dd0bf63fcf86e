"""kernel.peers.protocol: the one call skeleton of the peer adapters (validate -> early result ->
load -> prepare -> run -> finish), the Backend built from an adapter, the bench's bare call, the
refusals of a Triton adapter, and every built-in peer in the catalogue behind it; a recording
fake adapter on the CPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from kernel import registry
from kernel.backend import BackendUnavailable
from kernel.contract import CallInfo, ContractError
from kernel.peers import protocol
from kernel.peers.protocol import BareRow, CallArgs, Declaration, TritonAdapter, backend_from_adapter, bare_call, run_peer
from kernel.record import LATENT_DIM, RECORD_BYTES
from strategies.materialize import materialize
from strategies.recipe import Recipe

DECLARATION = Declaration(
    name="fake-peer",
    profile="bf16-q-bf16-p",
    limits=("a fake",),
    bounded_index_reads=True,
    batch_invariant=False,
    devices=("cpu", "cuda"),
    max_heads=8,
    head_counts=(2, 4),
    accepts_out=True,
    bare=BareRow(":bare-kernel", None, "fake (bare)", "the fake's run"),
)


@dataclass
class FakeCall:
    """Records its steps in the adapter's log; the 'kernel' writes q's first 512 dims times 2."""

    log: list[str]
    q: torch.Tensor
    state: Any
    result: torch.Tensor | None = None

    def run(self) -> None:
        self.log.append("run")
        self.result = self.q[..., :LATENT_DIM].float() * 2

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.log.append("finish")
        assert self.result is not None
        got = self.result.to(torch.bfloat16)
        if out is not None:
            out.copy_(got)
            got = out
        lse = torch.zeros(got.shape[:2]) if return_lse else None
        return got, lse


@dataclass
class FakeAdapter:
    log: list[str] = field(default_factory=list)
    refuse: str = ""
    declaration: Declaration = DECLARATION
    prepared: list[dict[str, Any]] = field(default_factory=list)

    def load(self) -> str:
        self.log.append("load")
        if self.refuse:
            raise BackendUnavailable(self.refuse)
        return "engine"

    def new_state(self, engine: Any, *, kept: bool = True) -> dict[str, Any]:
        self.log.append(f"new_state(kept={kept})")
        return {"engine": engine, "kept": kept, "calls": 0}

    def support(self, info: CallInfo) -> str:
        return "no odd row counts" if info.n_q % 2 else ""

    def prepare(self, engine: Any, state: Any, args: CallArgs) -> FakeCall:
        self.log.append("prepare")
        self.prepared.append({"engine": engine, "state": state, "has_invalid": args.has_invalid, "out": args.out, "args": args})
        if state is not None:
            state["calls"] += 1
        return FakeCall(self.log, args.q, state)


def _problem(n_q: int = 2, heads: int = 2) -> dict[str, Any]:
    x = materialize(Recipe(seed=5, n_q=n_q, heads=heads, row_lengths=(3,) * n_q, cache_rows=16), "cpu")
    return {"q": x.q, "kv_cache": x.kv_cache, "indices": x.indices, "indptr": x.indptr, "softmax_scale": x.softmax_scale}


def test_run_peer_validates_loads_prepares_runs_and_finishes_in_that_order() -> None:
    adapter = FakeAdapter()
    p = _problem()
    out, lse = run_peer(adapter, **p, return_lse=True)
    assert adapter.log == ["load", "prepare", "run", "finish"]
    assert torch.equal(out, (p["q"][..., :LATENT_DIM].float() * 2).to(torch.bfloat16))
    assert lse is not None and lse.shape == (2, 2)
    assert adapter.prepared[0]["engine"] == "engine" and adapter.prepared[0]["state"] is None
    args = adapter.prepared[0]["args"]
    assert all(getattr(args, name) is p[name] for name in ("q", "kv_cache", "indices", "indptr"))  # the caller's tensors, no copies
    assert args.softmax_scale == p["softmax_scale"] and args.has_invalid is False and args.out is None
    assert args.kv_rows == p["kv_cache"].numel() // RECORD_BYTES == 16


def test_run_peer_with_an_engine_and_state_does_not_load_and_passes_them_on() -> None:
    adapter, state = FakeAdapter(), {"calls": 0}
    p = _problem()
    buf = torch.full((2, 2, LATENT_DIM), float("nan"), dtype=torch.bfloat16)
    out, lse = run_peer(adapter, **p, has_invalid=True, out=buf, engine="given", state=state)
    assert adapter.log == ["prepare", "run", "finish"] and out is buf and lse is None
    assert {k: adapter.prepared[0][k] for k in ("engine", "state", "has_invalid", "out")} == {
        "engine": "given",
        "state": state,
        "has_invalid": True,
        "out": buf,
    }
    assert state["calls"] == 1


def test_run_peer_refuses_a_bad_call_before_loading_and_returns_an_empty_call_early() -> None:
    adapter = FakeAdapter(refuse="must not be loaded")
    p = _problem()
    with pytest.raises(ContractError):
        run_peer(adapter, **dict(p, indices=p["indices"].to(torch.int64)))
    empty = dict(p, q=p["q"][:0], indptr=p["indptr"][:1])
    out, lse = run_peer(adapter, **empty, return_lse=True)
    assert out.shape == (0, 2, LATENT_DIM) and lse is not None and lse.shape == (0, 2)
    assert adapter.log == []
    with pytest.raises(BackendUnavailable, match="must not be loaded"):
        run_peer(adapter, **p)


def test_the_backend_holds_one_engine_and_one_state_and_declares_what_the_adapter_declares() -> None:
    adapter = FakeAdapter()
    backend = backend_from_adapter(adapter)
    assert adapter.log == ["load", "new_state(kept=True)"]
    for name in (
        "name",
        "profile",
        "limits",
        "bounded_index_reads",
        "batch_invariant",
        "devices",
        "max_heads",
        "head_counts",
        "accepts_out",
    ):
        assert getattr(backend, name) == getattr(DECLARATION, name), name
    p = _problem()
    backend(**p)
    backend(**p, return_lse=True)
    states = [c["state"] for c in adapter.prepared]
    assert states[0] is states[1] and states[0]["calls"] == 2 and states[0]["kept"] is True
    assert adapter.log.count("load") == 1
    assert backend.supports(**p) and not backend.supports(**_problem(n_q=3))  # the adapter's own refusal
    assert "no odd row counts" in backend.supports(**_problem(n_q=3)).reason
    assert not backend.supports(**_problem(heads=3))  # head_counts from the declaration


def test_the_backend_refuses_where_the_engine_does_not_load() -> None:
    with pytest.raises(BackendUnavailable, match="no engine here"):
        backend_from_adapter(FakeAdapter(refuse="fake-peer: no engine here"))


def test_bare_call_prepares_once_without_kept_state_and_times_only_the_run() -> None:
    adapter = FakeAdapter()
    p = _problem()
    run = bare_call(adapter, "engine", *p.values())
    assert adapter.log == ["new_state(kept=False)", "prepare"]
    assert adapter.prepared[0]["has_invalid"] is False and adapter.prepared[0]["out"] is None
    assert adapter.prepared[0]["state"]["kept"] is False and adapter.prepared[0]["args"].q is p["q"]
    run()
    run()
    assert adapter.log == ["new_state(kept=False)", "prepare", "run", "run"]


def test_call_args_are_frozen_and_default_to_the_contract_defaults() -> None:
    p = _problem()
    args = CallArgs(*p.values())
    assert args.has_invalid is False and args.out is None and args.kv_rows == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.q = p["q"]  # type: ignore[misc]


@dataclass
class FakeTriton(TritonAdapter):
    """A Triton adapter whose engine is a string; counts its engine loads."""

    declaration: Declaration = DECLARATION
    loads: int = 0

    def load_engine(self) -> str:
        self.loads += 1
        return "engine"


def _info(device: str) -> CallInfo:
    return CallInfo(
        n_q=1, heads=1, n_indices=1, kv_rows=1, has_invalid=False, return_lse=False, out_given=False, device=torch.device(device)
    )


def test_a_triton_adapter_refuses_by_cuda_reason_before_it_loads_its_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def no_cuda(name: str) -> str:
        asked.append(name)
        return f"{name}: no CUDA device"

    monkeypatch.setattr(protocol, "cuda_reason", no_cuda)
    adapter = FakeTriton()
    with pytest.raises(BackendUnavailable, match="^fake-peer: no CUDA device$"):
        adapter.load()
    assert adapter.loads == 0 and asked == ["fake-peer"]
    assert adapter.support(_info("cuda")) == "fake-peer: no CUDA device"
    assert adapter.support(_info("cpu")) == ""  # the declaration's devices refuse a CPU call
    monkeypatch.setattr(protocol, "cuda_reason", lambda name: "")
    assert adapter.load() == "engine" and adapter.loads == 1 and adapter.support(_info("cuda")) == ""


def test_a_declaration_on_the_calls_own_heads_labels_its_rows_by_name() -> None:
    d = Declaration.on_own_heads("peer-x", "p.toml", ("l",), bounded_index_reads=True, batch_invariant=False, note="n", bare_note="b")
    assert (d.name, d.profile, d.limits, d.bounded_index_reads, d.batch_invariant) == ("peer-x", "p.toml", ("l",), True, False)
    assert d.label == "peer-x (adapter)" and d.note == "n"
    assert d.bare == BareRow(":bare-kernel", None, "peer-x (bare kernel)", "b")
    assert (d.devices, d.max_heads, d.head_counts, d.accepts_out) == (("cuda",), 16, None, True)


@pytest.mark.parametrize("name", [n for n in registry.BUILTIN_NAMES if registry.BUILTINS[n].adapter])
def test_every_builtin_peer_is_an_adapter_with_its_declaration(name: str) -> None:
    adapter = registry.adapter(name)
    assert adapter is not None
    d = adapter.declaration
    assert d.name == name and d.limits and d.profile and d.devices == ("cuda",) and d.max_heads == 16
    assert d.bare is not None and d.label and d.note
    assert not d.profile.endswith(".toml") or Path(d.profile).is_file()  # a shipped profile file (protocol.profile_file)
    for step in ("load", "new_state", "support", "prepare"):
        assert callable(getattr(adapter, step)), step
    cpu = CallInfo(n_q=1, heads=1, n_indices=1, kv_rows=1, has_invalid=False, return_lse=False, out_given=False, device=torch.device("cpu"))
    assert adapter.support(cpu) == ""  # device reasons are about CUDA devices; a CPU call is refused by `devices`
    try:
        backend = registry.resolve(name)
    except BackendUnavailable as err:
        assert name in str(err) or "flashmla" in str(err)  # the refusal names the kernel
    else:
        assert backend.name == name and backend.extra_support is not None
