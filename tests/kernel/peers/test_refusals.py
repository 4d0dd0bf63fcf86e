"""A backend whose own stack cannot run refuses at resolve time with the cause, before any test:
vLLM's Triton kernels when vLLM disabled Triton (its kernel files then hold placeholder `triton` /
`tl` modules, and every launch would fail as if the kernel broke its contract), FlashMLA when its
compiled op is not registered.

The vLLM cases run in subprocesses over fake packages written to a temporary folder: a `triton`
without `triton.backends` (what vLLM's import check trips on) and a `vllm` whose
`vllm.triton_utils` hands out placeholders, as vLLM does when HAS_TRITON is False. CUDA is
reported present in those processes (torch.cuda.is_available patched), so the refusal is the
engine's, not the missing device's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from kernel.backend import BackendUnavailable
from kernel.peers import flashmla
from kernel.registry import resolve

REPO = Path(__file__).resolve().parents[3]

FAKE_CUDA = "import torch\ntorch.cuda.is_available = lambda: True\n"

PLACEHOLDERS = textwrap.dedent(
    '''
    import types


    class TritonPlaceholder(types.ModuleType):
        """What vLLM hands out for `triton` when it disabled Triton: jit returns the function."""

        def __init__(self):
            super().__init__("triton")
            self.jit = lambda fn=None, **kwargs: fn if fn is not None else (lambda f: f)


    class TritonLanguagePlaceholder(types.ModuleType):
        def __init__(self):
            super().__init__("triton.language")
            self.constexpr = None
    '''
)


def _fake_engine(root: Path, *, has_triton: str) -> Path:
    """Write the fake `triton` and `vllm` packages under root; has_triton: "False" (vLLM's flag
    says disabled), "absent" (no flag, placeholders in the kernel files) or "True" (Triton kept)."""
    files = {
        "triton/__init__.py": "__version__ = '3.9.0'\nfrom triton import language\n\n\ndef jit(fn):\n    return fn\n",
        "triton/language/__init__.py": "constexpr = int\n",
        "vllm/__init__.py": "",
        "vllm/v1/__init__.py": "",
        "vllm/v1/attention/__init__.py": "",
        "vllm/v1/attention/ops/__init__.py": "",
        "vllm/v1/attention/ops/triton_decode_attention.py": (
            "from vllm.triton_utils import tl, triton\n\n\ndef decode_attention_fwd(*args):\n    return triton.next_power_of_2(512)\n"
        ),
        "vllm/v1/attention/ops/xpu_mla_sparse.py": (
            "from vllm.triton_utils import tl, triton\n\n\n@triton.jit\ndef _kernel(x):\n    pass\n\n\n"
            "def triton_bf16_mla_sparse_interface(*args):\n    _kernel[(1,)](0)\n"
        ),
    }
    if has_triton == "True":
        files["vllm/triton_utils/__init__.py"] = "HAS_TRITON = True\nimport triton\nimport triton.language as tl\n"
    else:
        flag = "HAS_TRITON = False\n" if has_triton == "False" else ""
        files["vllm/triton_utils/__init__.py"] = PLACEHOLDERS + flag + "triton = TritonPlaceholder()\ntl = TritonLanguagePlaceholder()\n"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "CONFORMANCE_")) and k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(REPO)])
    return env


def _resolve_in_subprocess(folder: Path, names: list[str]) -> dict[str, str]:
    """{name: "ok" or "BackendUnavailable: message" or "TypeName: message"} from a fresh process."""
    code = FAKE_CUDA + textwrap.dedent(
        """
        import json, sys
        from kernel import engines
        from kernel.peers import vllm_decode, vllm_sparse
        from kernel.registry import resolve

        modules = {"vllm-decode": vllm_decode.KERNEL_MODULE, "vllm-sparse": vllm_sparse.KERNEL_MODULE}
        result = {}
        for name in sys.argv[1:]:
            try:
                if name.startswith("load:"):
                    engines.load_vllm(modules[name[5:]], name[5:])
                else:
                    resolve(name)
                result[name] = "ok"
            except Exception as err:
                result[name] = f"{type(err).__name__}: {err}"
        print(json.dumps(result))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=folder, env=_env(folder), capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("has_triton", ["False", "absent"])
def test_vllm_backends_refuse_when_vllm_disabled_triton(tmp_path: Path, has_triton: str) -> None:
    folder = _fake_engine(tmp_path, has_triton=has_triton)
    result = _resolve_in_subprocess(folder, ["vllm-decode", "vllm-sparse"])
    for name in ("vllm-decode", "vllm-sparse"):
        message = result[name]
        assert message.startswith(f"BackendUnavailable: {name}: vLLM disabled Triton in this process"), message
        assert "HAS_TRITON is False" in message and "triton.backends cannot be imported" in message, message
        assert "\n" not in message


def test_vllm_kernels_load_when_triton_is_kept(tmp_path: Path) -> None:
    """The same fake engine with Triton kept: the kernel modules load (the refusal above is the flag's)."""
    folder = _fake_engine(tmp_path, has_triton="True")
    result = _resolve_in_subprocess(folder, ["load:vllm-decode", "load:vllm-sparse"])
    assert result == {"load:vllm-decode": "ok", "load:vllm-sparse": "ok"}, result


def test_suite_session_stops_with_the_cause_before_any_test(tmp_path: Path) -> None:
    """`pytest --pyargs conformance --conformance-kernel vllm-decode` over the disabled engine: a
    usage error (exit 4) naming the cause, no test run, nothing counted against the kernel."""
    folder = _fake_engine(tmp_path / "engine", has_triton="False")
    (folder / "fake_cuda_present.py").write_text(FAKE_CUDA, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    env = _env(folder)
    env["CONFORMANCE_DIR"] = str(tmp_path / "state")
    argv = [sys.executable, "-m", "pytest", "-p", "fake_cuda_present", "-p", "no:cacheprovider", "-q", "--pyargs", "conformance"]
    proc = subprocess.run(
        [*argv, "--conformance-kernel", "vllm-decode"], cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("ERROR: conformance:")]
    assert len(errors) == 1, output[-3000:]
    assert "vllm-decode: vLLM disabled Triton in this process" in errors[0] and "triton.backends" in errors[0], errors[0]
    assert " passed" not in output and " failed" not in output, output[-3000:]


class _FakeFlashMLA(types.ModuleType):
    """A `flash_mla` that imports, has its legacy extension, and reaches its ops through
    `_loader.get_ops(use_legacy)` as sgl-flash-mla 1.0.0 does."""

    def __init__(self, ops: object) -> None:
        super().__init__("flash_mla")
        self._loader = types.SimpleNamespace(get_ops=lambda use_legacy: ops)

    def has_legacy(self) -> bool:
        return True


@pytest.mark.parametrize(("name", "op"), [("flashmla", "sparse_decode_fwd"), ("flashmla-prefill", "sparse_prefill_fwd")])
def test_flashmla_refuses_when_its_op_is_not_registered(monkeypatch: pytest.MonkeyPatch, name: str, op: str) -> None:
    namespace = "conformance_unregistered_ns"  # torch.ops namespace nothing registers in: every op lookup fails
    monkeypatch.setitem(sys.modules, "flash_mla", _FakeFlashMLA(getattr(torch.ops, namespace)))
    monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
    with pytest.raises(BackendUnavailable) as info:
        resolve(name)
    message = str(info.value)
    assert message.startswith(f"{name}: flash_mla imports but its compiled op {namespace}::{op} is not registered"), message
    assert "sgl-flash-mla==1.0.0" in message and "\n" not in message


def test_flashmla_resolves_when_its_ops_are_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = "conformance_registered_ns"
    library = torch.library.Library(namespace, "FRAGMENT")
    for op in ("sparse_decode_fwd", "sparse_prefill_fwd"):
        library.define(f"{op}(Tensor x) -> Tensor")
    monkeypatch.setitem(sys.modules, "flash_mla", _FakeFlashMLA(getattr(torch.ops, namespace)))
    monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
    assert resolve("flashmla").name == "flashmla" and resolve("flashmla-prefill").name == "flashmla-prefill"


def test_flashmla_loader_refusal_is_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _FakeFlashMLA(None)

    def refuse(use_legacy: bool) -> object:
        raise RuntimeError("The legacy FlashMLA kernels are not available: libcuda.so.1: cannot open shared object file")

    module._loader = types.SimpleNamespace(get_ops=refuse)
    monkeypatch.setitem(sys.modules, "flash_mla", module)
    monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
    with pytest.raises(BackendUnavailable, match=r"^flashmla: flash_mla's legacy kernels are unavailable \(RuntimeError: .*libcuda"):
        resolve("flashmla")
