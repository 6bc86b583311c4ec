"""Deprecated path, kept for one release: the `magrpo-population` command's module is now
`magrpo.cli.population` (docs/development.md). `import magrpo.population` hands out that module itself, so its
names and `python -m magrpo.population` work as before."""

import sys

from magrpo.cli import population as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
