"""`python -m distrun`: the `distrun` command."""

import sys

from distrun.client.cli import main

sys.exit(main())
