"""Only the build step that pyproject.toml cannot declare: a wheel carries the layer kinds.

The layer kinds (layers/) and the skeleton (Dockerfile.j2) live at the repository's top level by
design. At build time they are copied into the package as builder/_shipped/, so that an installed
imgbuild finds them (builder.load.kindpath.shipped_root); nothing is duplicated in git. Everything else
is configured in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("layers", "Dockerfile.j2")   # top-level paths copied, whole, into builder/_shipped/
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class build_py_with_kinds(build_py):
    """build_py, then layers/ and Dockerfile.j2 copied into builder/_shipped/ of the build tree. An
    editable install skips the copy: it reads them from the checkout."""

    def _shipped_dest(self) -> Path:
        return Path(self.build_lib) / "builder" / "_shipped"

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = self._shipped_dest()
        if dest.exists():
            shutil.rmtree(dest)   # a stale build/ must not ship a kind removed since
        dest.mkdir(parents=True)
        for name in SHIPPED:
            src = HERE / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=IGNORE)   # copy2: modes kept (they are in the keys)
            else:
                shutil.copy2(src, dest / name)

    def get_outputs(self, include_bytecode=1):
        outputs = list(super().get_outputs(include_bytecode))
        dest = self._shipped_dest()
        if not getattr(self, "editable_mode", False) and dest.is_dir():
            outputs += [str(p) for p in sorted(dest.rglob("*")) if p.is_file()]
        return outputs


setup(cmdclass={"build_py": build_py_with_kinds})
