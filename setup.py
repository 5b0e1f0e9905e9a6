"""What pyproject.toml cannot say: the parser's optional C scanner, and the shipped configs in the wheel.

Without a C compiler the build still succeeds and the parser runs its pure-Python path (slower; the
benchmark and ``cvs-tui --version`` say which one is in use).
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildWithConfigs(build_py):
    """Copies ``configs/`` to ``cvs_tui/_shipped_configs`` in the wheel (a checkout reads it in place)."""

    def run(self) -> None:
        super().run()
        src = Path(__file__).parent / "configs"
        dst = Path(self.build_lib) / "cvs_tui" / "_shipped_configs"
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)


setup(
    cmdclass={"build_py": BuildWithConfigs},
    ext_modules=[
        Extension(
            "cvs_tui.core.parse._native",
            ["cvs_tui/core/parse/_native.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wno-missing-field-initializers"],
        ),
        Extension(
            "cvs_tui.core._eventjson",
            ["cvs_tui/core/_eventjson.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wno-missing-field-initializers"],
        ),
    ],
)
