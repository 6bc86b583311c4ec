"""`magrpo-table DIR [DIR ...]`: tables and learning curves from run directories. The command's
options and checks live with the table machinery (magrpo.table.cli; the layouts: magrpo.table)."""

import sys

from magrpo.table.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
