"""Errors and checker findings of the gfx950 interpreter."""

from __future__ import annotations

from dataclasses import dataclass, field


class IsaError(RuntimeError):
    """Base class of every interpreter error."""


class UnknownInstruction(IsaError):
    """An opcode, operand form, modifier or modifier value the interpreter does not implement.
    Raised at load time (decode), so nothing is ever silently skipped."""


class UnsupportedOperands(IsaError):
    """An implemented opcode met an operand range whose documented semantics are not modelled
    (e.g. v_div_scale_f32 on a denominator near the f32 limits); raised when executed."""


class AsmParseError(IsaError):
    """The assembly text or kernel descriptor could not be read."""


FINDING_KINDS = (
    "out_of_bounds",  # global access outside every registered tensor, or LDS access outside the allocation
    "lds_race",  # LDS read of bytes another wave wrote since the last barrier both passed
    "dma_before_wait",  # LDS read of bytes an LDS DMA (global_load_lds) wrote before the s_waitcnt covering it
    "uninitialized_read",  # register read before any write (per lane, per byte)
    "register_before_wait",  # VGPR / SGPR read while a load into it is outstanding (no s_waitcnt covering it)
)


@dataclass
class Finding:
    """One checker report: kind (FINDING_KINDS), workgroup, wave, instruction index and text,
    the lanes concerned (empty for scalar state), and a detail line."""

    kind: str
    workgroup: int
    wave: int
    pc: int
    text: str
    lanes: list[int] = field(default_factory=list)
    detail: str = ""

    def __str__(self) -> str:
        lanes = ""
        if self.lanes:
            shown = ",".join(str(x) for x in self.lanes[:8]) + (",..." if len(self.lanes) > 8 else "")
            lanes = f" lanes [{shown}] ({len(self.lanes)})"
        return f"{self.kind}: workgroup {self.workgroup} wave {self.wave} instruction #{self.pc} `{self.text}`{lanes}: {self.detail}"


class CheckFailed(IsaError):
    """Raised in checks="raise" mode at the first finding; .finding holds it."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(str(finding))
        self.finding = finding
