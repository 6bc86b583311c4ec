"""Deprecated path, kept for one release: the `magrpo-eval` command's module is now
`magrpo.cli.evaluate` (docs/development.md). `import magrpo.evaluate` hands out that module itself, so its
names and `python -m magrpo.evaluate` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import evaluate as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.evaluate", "magrpo-eval (python -m magrpo.cli.evaluate)")
    sys.exit(_command.main())
warn_renamed("magrpo.evaluate", "magrpo.cli.evaluate")
sys.modules[__name__] = _command
