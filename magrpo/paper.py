"""Deprecated path, kept for one release: the `magrpo-paper` command's module is now
`magrpo.cli.paper` (docs/development.md). `import magrpo.paper` hands out that module itself, so its
names and `python -m magrpo.paper` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import paper as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.paper", "magrpo-paper (python -m magrpo.cli.paper)")
    sys.exit(_command.main())
warn_renamed("magrpo.paper", "magrpo.cli.paper")
sys.modules[__name__] = _command
