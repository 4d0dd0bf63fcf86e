"""A wave-level gfx950 ISA interpreter: runs compiled gfx950 kernels (the project's FlyDSL kernel,
anyone's through a launch spec) on the CPU; it builds none (kernel.flydsl.isa_cache compiles).

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
    spec        launch specs (TOML) for `python -m kernel.isa run`
    contract_spec  `isa:PATH.s:SPEC.toml` kernels: a launch spec mapping the contract onto a kernel
    catalog     the opcode table

docs/reference/isa-opcodes.md has the opcode table and the semantics sources,
docs/explanation/isa-interpreter.md the model and the findings.
"""

from kernel.isa.errors import CheckFailed, Finding, IsaError, UnknownInstruction, UnsupportedOperands

__all__ = ["CheckFailed", "Finding", "IsaError", "UnknownInstruction", "UnsupportedOperands"]
