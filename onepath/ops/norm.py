"""``onepath.layer_norm``: torch.nn.functional.layer_norm on float32 / bfloat16 arrays, with an
optional residual added first in the same pass (the post-LayerNorm of a BERT block)."""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from .. import _stats, _threads
from ..dtypes import BF16, F32

_CODES = {F32: 0, BF16: 1}


def _affine(name: str, p, shape: tuple[int, ...]):
    if p is None:
        return None
    a = np.asarray(p)
    if a.dtype not in _CODES:
        raise TypeError(f"layer_norm: {name} must be float32 or bfloat16, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"layer_norm: {name} has shape {a.shape}, expected normalized_shape {shape}")
    return np.ascontiguousarray(a, dtype=F32).reshape(-1)


def _check_out(out, x: np.ndarray, r) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"layer_norm: out must be a numpy array, got {type(out).__name__}")
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"layer_norm: out is {out.dtype} {out.shape}, the result is {x.dtype} {x.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("layer_norm: out must be C-contiguous and writable")
    for name, a in (("x", x), ("residual", r)):
        if a is not None and np.may_share_memory(out, a) and not (
                a.ctypes.data == out.ctypes.data and a.dtype == out.dtype):
            raise ValueError(f"layer_norm: out overlaps {name} without being the same array")
    return out


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, *, residual=None, out=None):
    """LayerNorm over the trailing ``normalized_shape`` axes, as ``torch.nn.functional.layer_norm``:
    ``(v - mean) / sqrt(var + eps) * weight + bias`` with ``v = x`` (or ``x + residual``), the mean
    and the biased variance (divided by the element count, taken about the mean in a second pass)
    over those axes, computed in float32.

    Args:
        x: array (..., *normalized_shape), float32 or bfloat16.
        normalized_shape: int or tuple of ints, the trailing shape of x to normalise over.
        weight, bias: None or arrays of shape normalized_shape, float32 or bfloat16 (used in float32).
        eps: added to the variance (a float).
        residual: None, or an array of x's shape (float32 or bfloat16) added to x before the
            normalisation, in float32 and in the same pass (torch users write
            ``layer_norm(x + residual, ...)``; for bfloat16 operands that sum is rounded to
            bfloat16 first in torch, here it is not).
        out: None, or a writable C-contiguous array of x's shape and dtype to write the result into;
            it may be x itself or residual itself (in place), but not overlap them otherwise.
    Returns:
        out, or a new array of x's shape and dtype (a bfloat16 result is rounded once, to nearest
        even).
    Raises:
        TypeError: x, residual, weight or bias neither float32 nor bfloat16 (naming the dtype), or eps
            not a real number. ValueError: normalized_shape not the trailing shape of x (or empty, or
            with negative sizes), weight / bias / residual / out of another shape, out of another
            dtype, not C-contiguous, read-only or partly overlapping x or residual.
    Rows are split over ``onepath.get_num_threads()`` threads (one thread below 65536 elements); each
    row is computed by one thread in a fixed order, so the bits do not depend on the thread count
    or the ISA level (kernels/norm.c).
    """
    xa = np.asarray(x)
    if xa.dtype not in _CODES:
        raise TypeError(f"layer_norm: x must be float32 or bfloat16, got {xa.dtype}")
    if isinstance(normalized_shape, numbers.Integral):
        shape = (int(normalized_shape),)
    else:
        try:
            shape = tuple(operator.index(s) for s in normalized_shape)
        except TypeError:
            raise TypeError(f"layer_norm: normalized_shape must be an int or a tuple of ints, "
                            f"got {normalized_shape!r}") from None
    if not shape or any(s < 0 for s in shape):
        raise ValueError(f"layer_norm: normalized_shape must be a non-empty tuple of sizes >= 0, got {shape}")
    if xa.ndim < len(shape) or xa.shape[xa.ndim - len(shape):] != shape:
        raise ValueError(f"layer_norm: x of shape {xa.shape} does not end with normalized_shape {shape}")
    if not isinstance(eps, numbers.Real):
        raise TypeError(f"layer_norm: eps must be a real number, got {type(eps).__name__}")
    g = _affine("weight", weight, shape)
    b = _affine("bias", bias, shape)
    r = None
    if residual is not None:
        r = np.asarray(residual)
        if r.dtype not in _CODES:
            raise TypeError(f"layer_norm: residual must be float32 or bfloat16, got {r.dtype}")
        if r.shape != xa.shape:
            raise ValueError(f"layer_norm: residual has shape {r.shape}, x has {xa.shape}")
        r = np.ascontiguousarray(r)
    xa = np.ascontiguousarray(xa)
    if out is None:
        y = np.empty(xa.shape, xa.dtype)
    else:
        y = _check_out(out, xa, r)
    d = math.prod(shape)
    if y.size == 0:
        return y
    from ..dispatch.cap import isa
    from ..kernels import load
    level = isa()
    mod = load(level)
    ffi = mod.ffi

    def ptr(a, ctype="void *"):
        return ffi.cast(ctype, a.ctypes.data) if a is not None else ffi.NULL

    mod.lib.op_layer_norm(y.size // d, d, ptr(xa), _CODES[xa.dtype], ptr(r), _CODES[r.dtype] if r is not None else 0,
                          ptr(g, "const float *"), ptr(b, "const float *"), float(eps), ptr(y), _CODES[y.dtype],
                          _threads.get_num_threads())
    _stats.record("layer_norm", xa.dtype.name, level)
    return y

