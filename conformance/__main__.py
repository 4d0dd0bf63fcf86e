"""`python -m conformance ...`: see conformance.cli."""

import sys


def _forget_handled_interrupts() -> None:
    """Clear CPython's "unhandled KeyboardInterrupt" flag, so a handled interrupt exits with the
    code main() returned (130) instead of a SIGINT death. CPython sets the flag whenever a
    KeyboardInterrupt leaves code run from a string (`exec(str)`, as dataclasses and namedtuple
    do while a module imports), even when the caller then handles it, and checks it at exit;
    every `exec` of a string clears it first, so one harmless exec resets it."""
    exec("None")


if __name__ == "__main__":
    # a process-wide malloc setting: only for the `python -m conformance` process, never for a
    # caller of conformance.cli.main (a pytest worker, a notebook)
    from conformance.tools.host_memory import keep_freed_memory

    keep_freed_memory()
    try:
        from conformance.cli import main
    except KeyboardInterrupt:  # SIGINT while the command line itself is imported
        print("interrupted", file=sys.stderr)
        _forget_handled_interrupts()
        sys.exit(130)
    exit_code = main()
    _forget_handled_interrupts()
    sys.exit(exit_code)
