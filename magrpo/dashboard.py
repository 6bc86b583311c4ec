"""Deprecated path, kept for one release: the `magrpo-dashboard` command's module is now
`magrpo.cli.dashboard` (docs/development.md). `import magrpo.dashboard` hands out that module itself, so its
names and `python -m magrpo.dashboard` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import dashboard as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.dashboard", "magrpo-dashboard (python -m magrpo.cli.dashboard)")
    sys.exit(_command.main())
warn_renamed("magrpo.dashboard", "magrpo.cli.dashboard")
sys.modules[__name__] = _command
