"""The FlyDSL gfx950 kernel: `gfx950` (the kernel source), `host` (wrapper and backend),
`compile` (compile-only gfx950 checks over the dumped ISA)."""
