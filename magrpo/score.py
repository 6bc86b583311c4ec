"""Deprecated path, kept for one release: the `magrpo-score` command's module is now
`magrpo.cli.score` (docs/development.md). `import magrpo.score` hands out that module itself, so its
names and `python -m magrpo.score` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import score as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.score", "magrpo-score (python -m magrpo.cli.score)")
    sys.exit(_command.main())
warn_renamed("magrpo.score", "magrpo.cli.score")
sys.modules[__name__] = _command
