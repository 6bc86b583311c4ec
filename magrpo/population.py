"""Deprecated path, kept for one release: the `magrpo-population` command's module is now
`magrpo.cli.population` (docs/development.md). `import magrpo.population` hands out that module itself, so its
names and `python -m magrpo.population` work as before, each with a DeprecationWarning and a log line."""

import sys

from magrpo.cli import population as _command
from magrpo.schema import warn_renamed

if __name__ == "__main__":
    warn_renamed("python -m magrpo.population", "magrpo-population (python -m magrpo.cli.population)")
    sys.exit(_command.main())
warn_renamed("magrpo.population", "magrpo.cli.population")
sys.modules[__name__] = _command
