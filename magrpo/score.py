"""Deprecated path, kept for one release: the `magrpo-score` command's module is now
`magrpo.cli.score` (docs/development.md). `import magrpo.score` hands out that module itself, so its
names and `python -m magrpo.score` work as before."""

import sys

from magrpo.cli import score as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
