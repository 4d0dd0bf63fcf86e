"""Run hand-written gfx950 assembly snippets on the interpreter (test helper)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernel.isa.asm import parse_program
from kernel.isa.interp import WorkgroupResult, decode, run_workgroup
from kernel.isa.state import Checks, GlobalMemory, Wave

TEMPLATE = """\t.text
snippet:
{body}
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel snippet
\t\t.amdhsa_group_segment_fixed_size {lds}
\t\t.amdhsa_next_free_vgpr {vgprs}
\t\t.amdhsa_next_free_sgpr 96
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_system_sgpr_workgroup_id_x 1
\t.end_amdhsa_kernel
"""


def run_asm(
    body: str,
    *,
    threads: int = 64,
    lds: int = 4096,
    vgprs: int = 64,
    checks: str = "raise",
    setup: Callable[[Wave], None] | None = None,
    mem: GlobalMemory | None = None,
    lds_init: np.ndarray | None = None,
) -> WorkgroupResult:
    """Assemble `body` (instructions, one per line) into a one-workgroup kernel and run it."""
    text = TEMPLATE.format(body="\n".join("\t" + ln.strip() for ln in body.strip().splitlines()), lds=lds, vgprs=vgprs)
    dec = decode(parse_program(text))

    def wg_setup(wg) -> None:
        if lds_init is not None:
            wg.lds[: lds_init.size] = lds_init

    return run_workgroup(dec, 0, 0, mem or GlobalMemory(), Checks(checks), threads, setup=setup, wg_setup=wg_setup)


def vset(w: Wave, idx: int, val) -> None:
    """v[idx] = val (scalar broadcast or 64 values), defined."""
    w.v[idx] = np.broadcast_to(np.asarray(val, dtype=np.uint64).astype(np.uint32), (64,))
    w.vdef[idx] = 0xF


def sset(w: Wave, idx: int, val: int) -> None:
    w.s[idx] = val & 0xFFFFFFFF
    w.sdef[idx] = True


def f32b(x: float) -> int:
    return int(np.array(x, dtype=np.float32).view(np.uint32))
