"""`python -m kernel.isa run --asm K.s --args spec.toml [--checks collect|raise|off] [--save DIR]`:
run a compiled gfx950 kernel on the interpreter with the arguments a launch spec describes
(kernel.isa.spec); prints instructions, time and checker findings; --save writes every tensor
after the run as DIR/<name>.pt. Exit status: 0 clean, 1 findings, 2 bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernel.isa", description="run a gfx950 kernel on the ISA interpreter")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run K.s with the arguments of a launch spec")
    r.add_argument("--asm", type=Path, required=True)
    r.add_argument("--args", type=Path, required=True, help="launch spec (TOML), see kernel/isa/spec.py")
    r.add_argument("--checks", default="collect", choices=("raise", "collect", "off"))
    r.add_argument("--save", type=Path, default=None)
    a = ap.parse_args(argv)
    from kernel.isa.errors import CheckFailed, IsaError
    from kernel.isa.spec import run_spec_file

    try:
        rep = run_spec_file(a.asm, a.args, checks=a.checks)
    except CheckFailed as err:
        print(f"finding: {err}", file=sys.stderr)
        return 1
    except IsaError as err:
        print(f"error: {str(err).splitlines()[0]}" + ("" if "\n" not in str(err) else "\n" + str(err)), file=sys.stderr)
        return 2
    print(rep.summary())
    for f in rep.findings[:20]:
        print(f"  {f}")
    if a.save:
        import torch

        a.save.mkdir(parents=True, exist_ok=True)
        for name, t in rep.tensors.items():
            torch.save(t, a.save / f"{name}.pt")
    return 1 if rep.findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
