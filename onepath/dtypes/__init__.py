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
    from .. import _stats, _threads
    src = np.ascontiguousarray(x, dtype=F32)
    out = np.empty(src.shape, BF16)
    level, mod = _module(build)
    if src.size:
        mod.lib.op_cvt_f32_to_bf16(src.size, mod.ffi.cast("const float *", src.ctypes.data),
                                   mod.ffi.cast("uint16_t *", out.ctypes.data),
                                   _threads.get_num_threads())
    _stats.record("convert", "float32->bfloat16", level)
    return out


def to_float32(x, *, build: str | None = None) -> np.ndarray:
    """bfloat16 -> float32 (exact). Other dtypes go through numpy's astype."""
    from .. import _stats, _threads
    arr = np.asarray(x)
    if arr.dtype != BF16:
        return np.asarray(arr, F32)
    src = np.ascontiguousarray(arr)
    out = np.empty(src.shape, F32)
    level, mod = _module(build)
    if src.size:
        mod.lib.op_cvt_bf16_to_f32(src.size, mod.ffi.cast("const uint16_t *", src.ctypes.data),
                                   mod.ffi.cast("float *", out.ctypes.data),
                                   _threads.get_num_threads())
    _stats.record("convert", "bfloat16->float32", level)
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
