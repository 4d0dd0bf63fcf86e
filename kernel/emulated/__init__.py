"""The emulated gfx950 kernel family: `gfx950` (the kernel's algorithm in torch, the `emulated`
backend) and its stages' fast paths (`decode`, `qk`, `qk_cuda`, `scores`, `pv`, `pv_cuda`,
`state`), each used only after a bit-exact self-check against the torch operations."""
