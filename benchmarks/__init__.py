"""Durable measurements of the project, one routine per family (`python -m benchmarks ROUTINE --help`)."""
