"""`isa:PATH.s:SPEC.toml` backends (kernel.isa.contract_spec): the project's own compiled kernel
described by a launch spec gives the flydsl-isa backend's bits; bad specs are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernel.backend import BackendUnavailable
from kernel.registry import resolve

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "scripts" / "foreign_specs" / "project_gfx950_h16_i1_l1.toml"


def test_spec_backend_matches_flydsl_isa() -> None:
    pytest.importorskip("flydsl")
    from kernel.isa.build import kernel_asm_path
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    b = resolve(f"isa:{kernel_asm_path(16, True, True)}:{SPEC}")
    exact = dict(latent="exact", rope="exact", q="exact", softmax_scale="exact")
    r = Recipe(seed=3, n_q=2, heads=16, row_lengths=(5, 130), cache_rows=600, has_invalid=True, return_lse=True, **exact)
    x = materialize(r, "cpu")
    o1, l1 = b.fn(x.q, x.kv_cache, x.indices, x.indptr, x.softmax_scale, has_invalid=True, return_lse=True)
    o2, l2 = resolve("flydsl-isa").fn(x.q, x.kv_cache, x.indices, x.indptr, x.softmax_scale, has_invalid=True, return_lse=True)
    assert torch.equal(o1.view(torch.int16), o2.view(torch.int16)) and torch.equal(l1, l2)
    assert not b.supports(x.q, x.kv_cache, x.indices, x.indptr, x.softmax_scale, has_invalid=False, return_lse=True)


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
