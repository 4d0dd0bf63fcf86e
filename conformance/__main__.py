"""`python -m conformance ...`: see conformance.cli."""

import sys

if __name__ == "__main__":
    try:
        from conformance.cli import main
    except KeyboardInterrupt:  # SIGINT while the command line itself is imported
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
