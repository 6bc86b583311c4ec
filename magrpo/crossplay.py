"""Deprecated path, kept for one release: the `magrpo-crossplay` command's module is now
`magrpo.cli.crossplay` (docs/development.md). `import magrpo.crossplay` hands out that module itself, so its
names and `python -m magrpo.crossplay` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import crossplay as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.crossplay", "magrpo-crossplay (python -m magrpo.cli.crossplay)")
    sys.exit(_command.main())
warn_renamed("magrpo.crossplay", "magrpo.cli.crossplay")
sys.modules[__name__] = _command
