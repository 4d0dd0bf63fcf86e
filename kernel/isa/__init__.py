"""A wave-level gfx950 ISA interpreter that runs the project's compiled FlyDSL kernel on CPU.

Modules (one job each):
    asm         the project's one reader of LLVM AMDGPU assembly (the FlyDSL ISA checks use it too):
                instructions, labels, directives, metadata; kernel descriptor, kernarg layout
    cfg         basic blocks and loops of a parsed kernel
    numerics    bit-level fp8 / f16 / bf16 / E8M0 conversions, fused f32 FMA, exp/log/rcp models
    state       waves (VGPR/SGPR/EXEC/VCC/SCC/M0), LDS and its checker shadow, global memory table
    operands    operand getters / setters built at decode time (definedness checks included)
    ops_scalar  SALU, branches, s_barrier, s_waitcnt, SMEM
    ops_vector  VALU (VOP1/2/3/C/3P, SDWA), conversions, permlane swaps
    ops_memory  buffer / global / LDS-DMA / DS instructions
    ops_matrix  MFMA (16x16x32 f16/bf16, scaled 16x16x128 fp8)
    interp      decoder (unknown opcodes raise) and workgroup scheduler (waves run to barriers)
    launch      IsaKernel: kernarg packing and launch over a grid
    build       compile the FlyDSL kernel to ISA (subprocess) and cache it by source hash
    backend     the `flydsl-isa` registry backend (profile gfx950, CPU)

docs/isa.md has the opcode table, the semantics sources and the findings.
"""

from kernel.isa.errors import CheckFailed, Finding, IsaError, UnknownInstruction, UnsupportedOperands

__all__ = ["CheckFailed", "Finding", "IsaError", "UnknownInstruction", "UnsupportedOperands"]
