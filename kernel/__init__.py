"""Kernels under test and their contract.

Base (imports no kernel family): `kernel.record` and `kernel.fp8`, the fp8_ds_mla record codec;
`kernel.contract`, the call contract and its host validation; `kernel.backend`, `Backend` and
`BackendUnavailable`; `kernel.fastpath`, the one mechanism behind every fast path (a kernel used
only after a self-check against the torch operations it replaces); `kernel.cuda_binary`, the
nvcc build of the CUDA fast paths; `kernel.engines`, importing other projects' engine packages;
`kernel.writers`, record writers; `kernel.host_copy`, host values onto a device without a host sync.

Families (each imports base and itself only; `kernel.flydsl` also reads and runs assembly
through `kernel.isa`): `kernel.emulated`, the gfx950 kernel's algorithm in torch;
`kernel.peers`, adapters to other projects' kernels behind one protocol; `kernel.flydsl`, the
project's FlyDSL kernel, its compile-only checks and its compiled ISA; `kernel.isa`, the gfx950
ISA interpreter (it runs code, builds none).

`kernel.registry`: the catalogue, `resolve(name)`; the only module that imports the families.
"""
