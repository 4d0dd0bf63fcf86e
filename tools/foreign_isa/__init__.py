"""Other projects' public FlyDSL kernels compiled for gfx950 (compile-only, on the CPU), their ISA's
coverage by the interpreter, and runs of them from launch specs (`specs/<target>.toml`):
`python -m tools.foreign_isa compile | table | run` (see __main__)."""
