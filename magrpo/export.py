"""Deprecated path, kept for one release: the `magrpo-export` command's module is now
`magrpo.cli.export` (docs/development.md). `import magrpo.export` hands out that module itself, so its
names and `python -m magrpo.export` work as before."""

import sys

from magrpo.cli import export as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
