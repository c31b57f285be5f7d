"""Dtypes of onepath: ml_dtypes' ``bfloat16`` is the user-facing BFloat16.

Conversions run through the kernels of the ISA level in force (VCVTNE2PS2BF16 on AVX512_BF16 hosts,
the integer rounding trick elsewhere) and equal ml_dtypes' ``astype`` bit for bit: round to nearest
even, NaN -> quiet NaN with its sign, +-Inf, signed zeros and subnormals kept, overflow -> Inf.

Promotion of a matrix product (``result_dtype``):
    bfloat16 x bfloat16 -> bfloat16 (float32 accumulation, one rounding at the end)
    bfloat16 x float32  -> float32  (the bfloat16 operand widened exactly)
    dtype=float32 on bfloat16 inputs -> the float32 result, without the final rounding.
"""
from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

BF16 = np.dtype(bfloat16)
F32 = np.dtype(np.float32)

__all__ = ["bfloat16", "BF16", "F32", "to_bfloat16", "to_float32", "result_dtype", "is_bf16"]


def is_bf16(x) -> bool:
    """True when ``x`` (an array or a dtype) is bfloat16."""
    dt = x if isinstance(x, np.dtype) else getattr(x, "dtype", None)
    return dt == BF16


def _module(build: str | None):
    from ..kernels import load
    if build is None:
        from ..dispatch.cap import isa
        build = isa()
    return build, load(build)


def to_bfloat16(x, *, build: str | None = None) -> np.ndarray:
    """float32 (or anything numpy turns into float32) -> bfloat16 array of the same shape.

    build: a kernel build to use ("generic", ..., "amx_emu"); default the level in force.
    """
    return _convert(np.ascontiguousarray(x, dtype=F32), BF16, "f32_to_bf16", build)


def to_float32(x, *, build: str | None = None) -> np.ndarray:
    """bfloat16 -> float32 (exact). Other dtypes go through numpy's astype."""
    arr = np.asarray(x)
    if arr.dtype != BF16:
        return np.asarray(arr, F32)
    return _convert(np.ascontiguousarray(arr), F32, "bf16_to_f32", build)


def _convert(src: np.ndarray, out_dtype: np.dtype, direction: str, build: str | None) -> np.ndarray:
    """Run the level's op_cvt_<direction> kernel over a contiguous array (one pass, threaded)."""
    from .. import _stats, _threads
    out = np.empty(src.shape, out_dtype)
    level, mod = _module(build)
    if src.size:
        src_t, out_t = ("float[]", "uint16_t[]") if direction == "f32_to_bf16" else ("uint16_t[]", "float[]")
        getattr(mod.lib, "op_cvt_" + direction)(
            src.size, mod.ffi.from_buffer(src_t, src, require_writable=False),
            mod.ffi.from_buffer(out_t, out), _threads.get_num_threads())
    _stats.record("convert", "float32->bfloat16" if direction == "f32_to_bf16" else "bfloat16->float32",
                  level)
    return out


def result_dtype(a_dtype, b_dtype, dtype=None) -> np.dtype | None:
    """Result dtype of a product of ``a_dtype`` and ``b_dtype`` inputs under onepath's rules, or None
    when the pair is not bfloat16/float32 (numpy's rules apply then).

    dtype: the requested result dtype (None: promotion); float32 or bfloat16 accepted.
    """
    a, b = np.dtype(a_dtype), np.dtype(b_dtype)
    if a not in (BF16, F32) or b not in (BF16, F32):
        return None
    if dtype is not None:
        d = np.dtype(dtype)
        return d if d in (BF16, F32) else None
    return BF16 if a == BF16 and b == BF16 else F32
