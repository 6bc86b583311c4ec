"""Deprecated path, kept for one release: the `magrpo-paper` command's module is now
`magrpo.cli.paper` (docs/development.md). `import magrpo.paper` hands out that module itself, so its
names and `python -m magrpo.paper` work as before."""

import sys

from magrpo.cli import paper as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
