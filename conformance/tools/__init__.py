"""Measurements beside the suite: throughput (`bench`), KV cache and index dumps (`dumps`), the
bound's soundness check (`soundness`) and the device probes (`probe`)."""
