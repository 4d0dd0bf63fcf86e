"""Numerics discovery: directed problems that settle a kernel's unknown arithmetic, one at a time.

`conformance.tools.probe.mma` probes a bare matrix unit (a bf16 GEMM with f32 accumulation) in the
style of MMA-Sim (Xie et al., arXiv 2511.10909) and holds the candidate accumulation models;
`conformance.tools.probe.kernel` probes a whole sparse-MLA kernel through its contract (black box) and
writes a numerics profile (docs/how-to/measure-a-profile.md).
"""
