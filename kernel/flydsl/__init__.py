"""The project's FlyDSL gfx950 kernel: `gfx950` (the kernel source, written with `layout` and
`mlir_layer`), `host` (wrapper and backend), `compile` (compile-only gfx950 checks over the
dumped ISA: `isa_checks`, `isa_expect`, `isa_flow`, `pipeline_model`, `devicelibs`; `isa_edits`,
their self-test), `isa_cache` (the compiled ISA cached by source hash) and `isa_backend` (the
compiled kernel on the ISA interpreter); `launch_specs/` describes its configurations' launches
for `isa:` kernel specs."""
