"""Loader of the compiled kernel modules, one per ISA level (built by ``build.py``).

A level's module is imported only after the probe approved that level for this CPU and OS: its code
was compiled with that level's instructions and would fault (SIGILL) elsewhere. ``amx_emu`` (the AMX
kernel over a plain-C emulation of the tile instructions) runs on any host and exists for tests.
"""
from __future__ import annotations

import importlib
import threading

BUILDS = ("generic", "avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx", "amx_emu")
PORTABLE = ("generic", "amx_emu")

_lock = threading.Lock()
_loaded: dict[str, object] = {}


def load(build: str):
    """Return the compiled module (with ``.ffi`` and ``.lib``) of one build.

    Args:
        build: an ISA level name, or "amx_emu".
    Raises:
        ValueError: unknown build, or a level the host's CPU/OS cannot run (never a SIGILL).
        ImportError: the module was not compiled (e.g. a non-x86 install has only portable builds).
    """
    mod = _loaded.get(build)
    if mod is not None:
        return mod
    if build not in BUILDS:
        raise ValueError(f"unknown kernel build {build!r}; valid: {', '.join(BUILDS)}")
    if build not in PORTABLE:
        from ..dispatch.cpu import probe
        levels = probe().levels
        if build not in levels:
            raise ValueError(f"ISA level {build!r} cannot run on this host; valid: {', '.join(levels)}")
    with _lock:
        mod = _loaded.get(build)
        if mod is None:
            mod = importlib.import_module(f"onepath.kernels._op_{build}")
            if not _loaded:
                from ..dispatch.registry import on_clear
                on_clear(_set_all_options)  # a tuning file read or replaced: set them again
            _set_options(build, mod)
            _loaded[build] = mod
    return mod


def _set_options(build: str, mod) -> None:
    """Set the per-uarch options of the thin-product, float32 conv and bfloat16 kernels of a loaded
    module (the registry rules, or this host's tuning file), module-wide C state that every caller,
    ``tune`` included, then runs."""
    from ..dispatch.registry import (bf16_variant_flags, conv_bf16_flags, conv_f32_flags, conv_stem_flags,
                                     gemv_f32_flags)
    mod.lib.op_gemv_f32_options(gemv_f32_flags(build))
    mod.lib.op_conv_f32_options(conv_f32_flags(build))
    mod.lib.op_conv_bf16_options(conv_bf16_flags(build))
    mod.lib.op_conv_stem_options(conv_stem_flags(build))
    mod.lib.op_gemm_bf16_set_variants(bf16_variant_flags(build))


def _set_all_options() -> None:
    for build, mod in list(_loaded.items()):
        _set_options(build, mod)
