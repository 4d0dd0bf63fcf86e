"""Built-in kernels with the contract: `emulated` (torch), `flashmla` (Hopper), `flydsl` (gfx950)."""
