"""Build hook: cffi compiles one kernel module per ISA level (see onepath/kernels/build.py).

On x86-64 every level is built with its own explicit flags; elsewhere only the portable levels.
"""
import platform

from setuptools import setup

X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
BUILDS = ["probe", "generic", "amx_emu"]
if X86:
    BUILDS += ["avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx"]

setup(cffi_modules=[f"onepath/kernels/build.py:ffi_{name}" for name in BUILDS])
