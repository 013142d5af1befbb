"""Build step that maps the repository's top-level data into the package.

`templates/` (copier templates and the runtime), `schema/` and `examples/` (what
`agentgen init --example` writes) stay where they are in the repository; a built wheel (or any non-editable install, which pre-commit and pipx
make) gets a copy of each under `agentgen/_data/` (the repository's generator/ folder
installs as the package `agentgen`), read with importlib.resources by
generator/packaged.py. Everything else is configured in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGED = ("templates", "schema", "examples")
IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.pyo", ".mypy_cache", ".ruff_cache", "demo.py"
)


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's folders directly
        target = Path(self.build_lib) / "agentgen" / "_data"
        for name in PACKAGED:
            dest = target / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(ROOT / name, dest, ignore=IGNORE)


setup(cmdclass={"build_py": BuildPyWithData})
