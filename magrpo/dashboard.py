"""Deprecated path, kept for one release: the `magrpo-dashboard` command's module is now
`magrpo.cli.dashboard` (docs/development.md). `import magrpo.dashboard` hands out that module itself, so its
names and `python -m magrpo.dashboard` work as before."""

import sys

from magrpo.cli import dashboard as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
