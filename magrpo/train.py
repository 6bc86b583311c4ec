"""Deprecated path, kept for one release: the `magrpo-train` command's module is now
`magrpo.cli.train` (docs/development.md). `import magrpo.train` hands out that module itself, so its
names and `python -m magrpo.train` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import train as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.train", "magrpo-train (python -m magrpo.cli.train)")
    sys.exit(_command.main())
warn_renamed("magrpo.train", "magrpo.cli.train")
sys.modules[__name__] = _command
