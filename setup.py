"""Ships the repository's `conf/` inside the package as `magrpo/conf/` (wheels and non-editable
installs), so `magrpo-train` finds its configs from any directory. Everything else about the
package is declared in pyproject.toml. An editable install reads `conf/` in place
(magrpo.launch.conf_dir)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithConf(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            dest = Path(self.build_lib) / "magrpo" / "conf"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(ROOT / "conf", dest, ignore=shutil.ignore_patterns("__pycache__"))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            dest = Path(self.build_lib) / "magrpo" / "conf"
            outputs += [str(dest / p.relative_to(ROOT / "conf")) for p in (ROOT / "conf").rglob("*") if p.is_file()]
        return outputs


setup(cmdclass={"build_py": BuildPyWithConf})
