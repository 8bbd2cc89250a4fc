"""`python -m cli ...` runs the `day0` command line."""

import sys

from cli import run

sys.exit(run())
