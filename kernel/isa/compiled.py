"""Batched closures: one call executes an instruction for a whole lockstep group of waves
(kernel.isa.lockstep.Batch), on [k, 64] lane arrays, with the per-wave semantics' bits."""

from __future__ import annotations

from typing import Any

from kernel.isa.asm import Program


def compile_batched(program: Program, d: Any) -> list:
    """The batched closure of each instruction, or None where it runs wave by wave."""
    return [None for _ in program.instrs]
