"""Deprecated path, kept for one release: the `magrpo-eval` command's module is now
`magrpo.cli.evaluate` (docs/development.md). `import magrpo.evaluate` hands out that module itself, so its
names and `python -m magrpo.evaluate` work as before."""

import sys

from magrpo.cli import evaluate as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command
