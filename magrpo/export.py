"""Deprecated path, kept for one release: the `magrpo-export` command's module is now
`magrpo.cli.export` (docs/development.md). `import magrpo.export` hands out that module itself, so its
names and `python -m magrpo.export` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import export as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.export", "magrpo-export (python -m magrpo.cli.export)")
    sys.exit(_command.main())
warn_renamed("magrpo.export", "magrpo.cli.export")
sys.modules[__name__] = _command
