"""Developer tools run from the repository root as `python -m tools.NAME` (not installed with the
package): the import graph's rules and picture (`import_graph`), other projects' FlyDSL kernels
compiled and run on the ISA interpreter (`foreign_isa`)."""
