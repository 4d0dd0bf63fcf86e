"""Adapters to other projects' kernels (FlashMLA, PyTorch's SDPA, sglang's and vLLM's Triton
kernels), each presenting the kernel contract; `plumbing` (index layouts, head padding, output
mapping) and `keys` (bf16 keys from the records) are what they share."""
