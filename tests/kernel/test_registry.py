"""Kernel specs (kernel.registry): the built-in table, kernels given as a file path, and
portable_spec / portable_env, checked by resolving the portable spec in a fresh process started
from another working directory."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernel import registry
from kernel.backend import Backend, BackendUnavailable
from kernel.registry import BUILTIN_NAMES, BUILTINS, portable_env, portable_spec, resolve

REPO = Path(__file__).resolve().parents[2]

KERNEL_FILE = textwrap.dedent(
    '''
    """A kernel file with a sibling module (written by tests/kernel/test_registry.py)."""
    from helper_k17 import run, PROFILE


    def kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
        return run(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


    kernel.profile = PROFILE
    '''
)
HELPER = textwrap.dedent(
    """
    from kernel.emulated.gfx950 import run_emulated as run

    PROFILE = "gfx950"
    """
)


def test_every_builtin_has_its_factory_and_one_line_description() -> None:
    assert BUILTIN_NAMES == tuple(BUILTINS) and len(set(BUILTIN_NAMES)) == len(BUILTIN_NAMES)
    for name, entry in BUILTINS.items():
        assert entry.name == name and entry.description and "\n" not in entry.description
        module = importlib.import_module(entry.module)
        assert bool(entry.factory) != bool(entry.adapter), f"{name}: a factory or an adapter, not both"
        if entry.adapter:
            adapter = getattr(module, entry.adapter)
            assert registry.adapter(name) is adapter and adapter.declaration.name == name, name
            assert all(callable(getattr(adapter, step)) for step in ("load", "new_state", "support", "prepare")), name
        else:
            assert callable(getattr(module, entry.factory)), name
            assert registry.adapter(name) is None
        assert getattr(module, "NAME", name) == name, f"{entry.module}.NAME differs from the table's {name!r}"
    lines = registry.builtin_lines()
    assert [line.split()[0] for line in lines] == list(BUILTIN_NAMES)


def test_builtin_resolves_or_says_why() -> None:
    backend = resolve("emulated")
    assert isinstance(backend, Backend) and backend.name == "emulated"
    for name in ("sglang-decode", "vllm-decode", "vllm-sparse", "flashmla"):
        try:
            assert resolve(name).name == name
        except BackendUnavailable as err:
            assert str(err) and "\n" not in str(err)


@pytest.fixture
def kernel_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "my kernels"  # a space in the path as well
    folder.mkdir()
    (folder / "my_kernel_k17.py").write_text(KERNEL_FILE, encoding="utf-8")
    (folder / "helper_k17.py").write_text(HELPER, encoding="utf-8")
    return folder


def test_file_spec_relative_to_the_working_directory(kernel_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(kernel_dir.parent)
    before = list(sys.path)
    backend = resolve("my kernels/my_kernel_k17.py:kernel")
    assert backend.profile == "gfx950" and backend.accepts_out
    assert sys.path == before  # the file's folder was on sys.path only while it executed
    module = backend.fn.__module__
    assert sys.modules[module].__file__ == str(kernel_dir / "my_kernel_k17.py")
    assert "helper_k17" in sys.modules  # the sibling import worked
    again = resolve(f"{kernel_dir}/my_kernel_k17.py:kernel")  # the same file by its absolute path
    assert again.fn is backend.fn
    monkeypatch.delitem(sys.modules, "helper_k17")
    monkeypatch.delitem(sys.modules, module)


def test_files_of_one_name_never_collide_or_shadow(tmp_path: Path) -> None:
    for folder, value in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "kernel.py").write_text(
            f"def k(*args, **kwargs):\n    return {value}\nk.profile = 'gfx950'\n", encoding="utf-8"
        )
    first, second = resolve(f"{tmp_path}/a/kernel.py:k"), resolve(f"{tmp_path}/b/kernel.py:k")
    assert first.fn() == 1 and second.fn() == 2
    assert sys.modules["kernel"].__file__ == str(REPO / "kernel" / "__init__.py")  # the project's package stays
    for backend in (first, second):
        del sys.modules[backend.fn.__module__]


def test_file_spec_attribute_gets_close_names(kernel_dir: Path) -> None:
    with pytest.raises(BackendUnavailable, match=r"has no attribute 'kernal'; did you mean kernel\?$"):
        resolve(f"{kernel_dir}/my_kernel_k17.py:kernal")
    sys.modules.pop("helper_k17", None)


# ---------------------------------------------------------------------------------------------
# portable_spec / portable_env: resolved again in a fresh process from another folder


def _fresh_resolve(spec: str, env_extra: dict[str, str], cwd: Path) -> str:
    """resolve(spec) in a new interpreter started in `cwd` with PYTHONPATH only from env_extra
    (plus the repository when a fresh interpreter cannot import the project): its profile, or
    the refusal."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("PYTEST_", "CONFORMANCE_"))}
    paths = [env_extra["PYTHONPATH"]] if "PYTHONPATH" in env_extra else []
    if not registry._fresh_location("kernel"):  # the project not installed: only the repository finds it
        paths.append(str(REPO))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    code = (
        "import json, sys\nfrom kernel.registry import resolve\n"
        "try:\n    print(json.dumps(str(resolve(sys.argv[1]).profile)))\n"
        "except Exception as err:\n    print(json.dumps(f'{type(err).__name__}: {err}'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, spec], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def test_builtin_and_isa_specs_stay(elsewhere: Path) -> None:
    for spec in ("emulated", "vllm-sparse", "isa:kernel.s:launch.toml", "isa:@h16_i1_l1:launch.toml"):
        assert portable_spec(spec) == spec and portable_env(spec) == {}
    assert _fresh_resolve(portable_spec("emulated"), {}, elsewhere) == "gfx950"


def test_relative_file_spec_becomes_absolute(kernel_dir: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(kernel_dir)
    spec = portable_spec("./my_kernel_k17.py:kernel")
    assert spec == f"{kernel_dir}/my_kernel_k17.py:kernel" and portable_env("./my_kernel_k17.py:kernel") == {}
    assert _fresh_resolve("./my_kernel_k17.py:kernel", {}, elsewhere).startswith(
        "BackendUnavailable: kernel './my_kernel_k17.py:kernel': no such file"
    )
    assert _fresh_resolve(spec, {}, elsewhere) == "gfx950"


def test_module_from_the_working_directory_becomes_its_file(kernel_dir: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`my_kernel_k17:kernel` found through the working directory (as `python -m pytest` puts it
    on sys.path): a fresh process elsewhere would not find it; its file path does."""
    monkeypatch.chdir(kernel_dir)
    monkeypatch.syspath_prepend(str(kernel_dir))
    spec = portable_spec("my_kernel_k17:kernel")
    assert spec == f"{kernel_dir}/my_kernel_k17.py:kernel" and portable_env("my_kernel_k17:kernel") == {}
    assert _fresh_resolve("my_kernel_k17:kernel", {}, elsewhere).startswith("BackendUnavailable: cannot import 'my_kernel_k17'")
    assert _fresh_resolve(spec, {}, elsewhere) == "gfx950"


def test_package_module_carries_its_folder(tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "src"
    (root / "pkg_k17").mkdir(parents=True)
    (root / "pkg_k17" / "__init__.py").write_text("", encoding="utf-8")
    (root / "pkg_k17" / "kernels.py").write_text(
        "from kernel.emulated.gfx950 import run_emulated as good\ngood.profile = 'gfx950'\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(root))  # as PYTHONPATH or a pytest rootdir insertion would
    spec = "pkg_k17.kernels:good"
    assert portable_spec(spec) == spec and portable_env(spec) == {"PYTHONPATH": str(root)}
    assert _fresh_resolve(spec, {}, elsewhere).startswith("BackendUnavailable: cannot import 'pkg_k17.kernels'")
    assert _fresh_resolve(portable_spec(spec), portable_env(spec), elsewhere) == "gfx950"


def test_installed_module_stays(elsewhere: Path) -> None:
    spec = "conformance.mutation.independent:float32_torch"
    fresh_finds_it = bool(registry._fresh_location("conformance"))
    assert portable_spec(spec) == spec
    assert portable_env(spec) == ({} if fresh_finds_it else {"PYTHONPATH": str(REPO)})
    assert _fresh_resolve(portable_spec(spec), portable_env(spec), elsewhere) == "fp32"
