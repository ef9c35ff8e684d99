"""`python -m tollgate.cli.epicctl`: epicctl, as the console script runs it."""

import sys

from tollgate.cli.epicctl import main

sys.exit(main())
