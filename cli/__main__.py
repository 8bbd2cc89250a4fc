"""`python -m cli ...` runs the `day0` command line."""

import sys

from cli.main import main

sys.exit(main())
