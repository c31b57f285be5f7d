"""cffi build script: one extension module per ISA level, each compiled with that level's explicit flags.

Run by setuptools through ``cffi_modules`` (see setup.py). Every level module exposes the same C API
(the ``api_*.h`` headers beside this file, parsed as cffi declarations) and is built from one unity
source ``level_<name>.c``. No module is built for the build host's own CPU (no native -march): a wheel built here imports on any
x86-64 CPU, and a level's module is only loaded after the probe approved that level.

``amx_emu`` is the AMX tile kernel compiled against the plain-C emulation of the tile intrinsics
(``amx_emu.h``) with baseline flags, so tests exercise the AMX packing and tile loop on any host.
"""
import os
import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
# Paths relative to the project root keep setuptools' object names short and distinct.
REL = os.path.relpath(HERE, pathlib.Path.cwd())

COMMON = ["-O3", "-std=c11", "-pthread", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function", "-Wno-psabi"]
AVX2 = ["-mavx", "-mavx2", "-mfma", "-mf16c"]
AVX512 = AVX2 + ["-mavx512f", "-mavx512cd", "-mavx512bw", "-mavx512dq", "-mavx512vl"]

# Level name -> compiler flags of that level. The single place where ISA flags are named.
LEVEL_FLAGS = {
    "generic": [],
    "avx2": AVX2,
    "avx512_core": AVX512,
    "avx512_core_bf16": AVX512 + ["-mavx512bf16"],
    "avx512_core_amx": AVX512 + ["-mavx512bf16", "-mamx-tile", "-mamx-bf16"],
    "amx_emu": [],
}


def _api_cdef():
    """Concatenate the API headers (cffi-compatible declarations, no preprocessor lines);
    api_gemm.h first: the others use its op_blocking / op_epilogue types."""
    return "\n".join((HERE / name).read_text()
                     for name in sorted(os.listdir(HERE), key=lambda f: (f != "api_gemm.h", f))
                     if name.startswith("api_") and name.endswith(".h") and name != "api_probe.h")


def _kernel_sources():
    """Every C piece a unity build includes: setuptools rebuilds a level when any of them changes."""
    return sorted(os.path.join(REL, n) for n in os.listdir(HERE)
                  if n.endswith((".c", ".h", ".inc")) and not n.startswith("_op_"))


def _level_ffi(level):
    ffi = FFI()
    ffi.cdef(_api_cdef())
    ffi.set_source(
        f"onepath.kernels._op_{level}",
        '#include "onepath_kernels.h"\n#include "pyfast.inc"',  # (pyfast.inc: Python's C API)
        sources=[os.path.join(REL, f"level_{level}.c")],
        include_dirs=[REL],
        depends=_kernel_sources(),
        extra_compile_args=COMMON + LEVEL_FLAGS[level],
        extra_link_args=["-pthread"],
        libraries=["m"],
    )
    return ffi


def _probe_ffi():
    ffi = FFI()
    ffi.cdef((HERE / "api_probe.h").read_text())
    ffi.set_source(
        "onepath.kernels._op_probe",
        '#include "api_probe.h"',
        sources=[os.path.join(REL, "probe.c")],
        include_dirs=[REL],
        extra_compile_args=["-O2", "-std=c11"],
    )
    return ffi


ffi_probe = _probe_ffi()
ffi_generic = _level_ffi("generic")
ffi_avx2 = _level_ffi("avx2")
ffi_avx512_core = _level_ffi("avx512_core")
ffi_avx512_core_bf16 = _level_ffi("avx512_core_bf16")
ffi_avx512_core_amx = _level_ffi("avx512_core_amx")
ffi_amx_emu = _level_ffi("amx_emu")

if __name__ == "__main__":  # developer convenience: build every module in place
    for name, ffi in list(globals().items()):
        if name.startswith("ffi_"):
            ffi.compile(tmpdir=str(HERE.parent.parent), verbose=False)
