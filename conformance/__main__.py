"""`python -m conformance ...`: see conformance.cli."""

import sys

from conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
