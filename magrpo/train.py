"""Deprecated path, kept for one release: the `magrpo-train` command's module is now
`magrpo.cli.train` (docs/development.md). `import magrpo.train` hands out that module itself, so its
names and `python -m magrpo.train` work as before."""

import sys

from magrpo.cli import train as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
