"""`isa:PATH.s:SPEC.toml` backends (kernel.isa.contract_spec): the project's own compiled kernel
described by a launch spec gives the flydsl-isa backend's bits; bad specs are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernel.backend import BackendUnavailable
from kernel.registry import resolve

ROOT = Path(__file__).resolve().parents[3]
SPECS = ROOT / "kernel" / "flydsl" / "launch_specs"
SPEC = SPECS / "h16_i1_l1.toml"


CONFIGS = [((16, True, True), False), ((1, False, False), True), ((5, True, True), True), ((8, False, True), True)]


@pytest.mark.parametrize("config, by_label", CONFIGS, ids=["h16_i1_l1-path", "h1_i0_l0-label", "h5_i1_l1-label", "h8_i0_l1-label"])
def test_spec_backend_matches_flydsl_isa(config: tuple[int, bool, bool], by_label: bool) -> None:
    """Each launch spec of kernel/flydsl/launch_specs (the .s by path, or as isa:@h.._i.._l..) gives
    flydsl-isa's bits for its configuration and refuses the other flags."""
    pytest.importorskip("flydsl")
    from kernel.flydsl.isa_cache import kernel_asm_path, label
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    h, hi, rl = config
    spec = SPECS / f"{label(*config)}.toml"
    b = resolve(f"isa:@{label(*config)}:{spec}" if by_label else f"isa:{kernel_asm_path(*config)}:{spec}")
    exact = dict(latent="exact", rope="exact", q="exact", softmax_scale="exact")
    r = Recipe(seed=3, n_q=2, heads=h, row_lengths=(5, 130), cache_rows=600, has_invalid=hi, return_lse=rl, **exact)
    x = materialize(r, "cpu")
    o1, l1 = b.fn(x.q, x.kv_cache, x.indices, x.indptr, x.softmax_scale, has_invalid=hi, return_lse=rl)
    o2, l2 = resolve("flydsl-isa").fn(x.q, x.kv_cache, x.indices, x.indptr, x.softmax_scale, has_invalid=hi, return_lse=rl)
    assert torch.equal(o1.view(torch.int16), o2.view(torch.int16))
    assert (l1 is None and l2 is None) if not rl else torch.equal(l1, l2)
    assert not b.supports(x.q, x.kv_cache, x.indices, x.indptr, x.softmax_scale, has_invalid=not hi, return_lse=rl)


def test_bad_configuration_label_is_named() -> None:
    with pytest.raises(BackendUnavailable, match="is not a configuration of the project's kernel"):
        resolve(f"isa:@h17_i1_l1:{SPEC}")
    with pytest.raises(BackendUnavailable, match="is not a configuration"):
        resolve(f"isa:@h16_i2_l1:{SPEC}")
    pytest.importorskip("flydsl")
    with pytest.raises(
        BackendUnavailable, match=r"describes heads=\[16\], has_invalid=True, return_lse=True, not the configuration h1_i0_l0"
    ):
        resolve(f"isa:@h1_i0_l0:{SPEC}")


ASM = """\t.text
k:
\ts_endpgm
\t.amdhsa_kernel k
\t\t.amdhsa_group_segment_fixed_size 0
\t\t.amdhsa_next_free_vgpr 8
\t\t.amdhsa_next_free_sgpr 8
\t.end_amdhsa_kernel
"""


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("", "[contract] table missing"),
        ("[contract]\nheads = [17]\n", "contract.heads must be"),
        ("[contract]\nheads = [16]\nhas_invalid = 1\n", "contract.has_invalid must be true or false"),
        ('[contract]\nheads = [16]\nhas_invalid = true\nreturn_lse = false\ngrid = "n_q"\ntypo = 1\n', "contract: unknown key(s) ['typo']"),
        ('[contract]\nheads = [16]\nhas_invalid = true\nreturn_lse = false\ngrid = "n_q"\n[[arg]]\ntensor = "q"\n', "takes 0 explicit"),
        ("[contract\n", "is not TOML"),
    ],
)
def test_bad_contract_spec_is_named(tmp_path: Path, spec: str, needle: str) -> None:
    (tmp_path / "k.s").write_text(ASM)
    (tmp_path / "s.toml").write_text(spec)
    with pytest.raises(BackendUnavailable) as err:
        resolve(f"isa:{tmp_path / 'k.s'}:{tmp_path / 's.toml'}")
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="cannot read"):
        resolve(f"isa:{tmp_path / 'nope.s'}:{SPEC}")
    with pytest.raises(BackendUnavailable, match="expected isa:PATH.s:SPEC.toml"):
        resolve("isa:only-one-part")
