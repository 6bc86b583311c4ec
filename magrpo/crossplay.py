"""Deprecated path, kept for one release: the `magrpo-crossplay` command's module is now
`magrpo.cli.crossplay` (docs/development.md). `import magrpo.crossplay` hands out that module itself, so its
names and `python -m magrpo.crossplay` work as before."""

import sys

from magrpo.cli import crossplay as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
