"""Build hook: cffi compiles one kernel module per ISA level (see onepath/kernels/build.py).

On x86-64 every level is built with its own explicit flags; elsewhere only the portable levels.
The modules are compiled in parallel (one compiler per CPU), and a module that an earlier build
left in the source tree (an editable install puts them there) is reused when it is newer than every
file it is built from (delete onepath/kernels/_op_*.so to force a rebuild). The wheel is tagged for
CPython's stable ABI from 3.10 on (cp310-abi3): cffi builds every module for the limited API.
"""
import os
import platform
import shutil
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
BUILDS = ["probe", "generic", "amx_emu"]
if X86:
    BUILDS += ["avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx"]
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_FILES = [os.path.join(HERE, "setup.py"), os.path.join(HERE, "onepath", "kernels", "build.py")]


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


class BuildExt(build_ext):
    """build_ext that compiles the modules in parallel and reuses up-to-date in-tree modules."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = _cpus()

    def build_extensions(self):
        # A Python built with a shared libpython (e.g. pyenv's) puts -Wl,-rpath,<its lib dir> in the
        # link line: the modules link no libpython (limited API), and a wheel must not carry a
        # build machine's path.
        linker = getattr(self.compiler, "linker_so", None)
        if isinstance(linker, list):
            self.compiler.linker_so = [a for a in linker if not a.startswith(("-Wl,-rpath", "-Wl,-R"))]
        super().build_extensions()

    def _in_tree(self, ext) -> str:
        """Where an in-place (editable) build puts this module."""
        modpath = self.get_ext_fullname(ext.name).split(".")
        package_dir = self.get_finalized_command("build_py").get_package_dir(".".join(modpath[:-1]))
        return os.path.join(HERE, package_dir, self.get_ext_filename(modpath[-1]))

    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        cached = self._in_tree(ext)
        # sources[0] is the C wrapper cffi generates anew in build_temp for every build (from the
        # api_*.h headers in depends and build.py): it says nothing about staleness.
        inputs = [os.path.join(HERE, p) for p in list(ext.sources[1:]) + list(ext.depends or [])] + BUILD_FILES
        if (not self.force and not self.inplace and os.path.abspath(cached) != os.path.abspath(target)
                and os.path.exists(cached)
                and all(os.path.getmtime(cached) > os.path.getmtime(p) for p in inputs if os.path.exists(p))):
            sys.stdout.write(f"reusing {os.path.relpath(cached, HERE)} (newer than its sources)\n")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(cached, target)
            return
        super().build_extension(ext)


setup(
    cffi_modules=[f"onepath/kernels/build.py:ffi_{name}" for name in BUILDS],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
