"""`python -m magrpo.table`: the same command as `magrpo-table`."""

import sys

from magrpo.table.cli import main

sys.exit(main())
