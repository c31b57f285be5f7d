"""Shared plumbing between the numpy front ends and the C GEMM entry points.

``run_gemm`` takes core matrices already arranged as (batch..., M, K) x (batch..., K, N) ->
(batch..., M, N) numpy views, turns their byte strides into the element strides and batch offsets
the C API wants (see kernels/api_gemm.h), and calls the selected kernel with the GIL released.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .. import _stats, _threads, _verbose
from ..dispatch import registry
from ..kernels import load

_ACT = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


def act_code(activation) -> int:
    """Map an activation name (None, "relu", "gelu", "gelu_tanh", "silu") to OP_ACT_*."""
    try:
        return _ACT[activation]
    except (KeyError, TypeError):
        raise ValueError(f"unknown activation {activation!r}; valid: None, "
                         + ", ".join(repr(k) for k in _ACT if k)) from None


def batch_offsets(x: np.ndarray, batch_shape: tuple) -> np.ndarray | None:
    """Element offsets (int64, one per entry of ``batch_shape``, C order) of each core matrix of
    ``x`` (shape batch + 2 core dims, batch broadcastable to ``batch_shape``); None if one entry."""
    nb = x.ndim - 2
    if math.prod(batch_shape) <= 1:
        return None
    off = np.zeros(x.shape[:nb], np.int64)
    item = x.itemsize
    for d in range(nb):
        if x.shape[d] > 1:
            shape = [1] * nb
            shape[d] = -1
            off = off + (np.arange(x.shape[d], dtype=np.int64) * (x.strides[d] // item)).reshape(shape)
    full = (1,) * (len(batch_shape) - nb) + x.shape[:nb]
    return np.ascontiguousarray(np.broadcast_to(off.reshape(full), batch_shape), np.int64).ravel()


def kernel_ready(x: np.ndarray) -> bool:
    """True when the kernels can read ``x`` in place: aligned, strides whole elements."""
    item = x.itemsize
    return x.flags.aligned and all(s % item == 0 for s in x.strides)


def _ptr(ffi, ctype, arr):
    return ffi.NULL if arr is None else ffi.cast(ctype, arr.ctypes.data)


_blk_cache: dict = {}


def run_gemm(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, *, bias=None, bias_axis=1,
             activation=None, row=None, shapes: str = "") -> None:
    """C[..., M, N] = A[..., M, K] @ B[..., K, N] (+ bias, activation) with the selected kernel.

    a, b: float32 arrays (batch dims broadcastable to c's); c: float32 output, written in place.
    All three must be ``kernel_ready``. ``row`` overrides the registry selection (tests, prepack).
    """
    if row is None:
        row = registry.select(op, "float32")
    mod = load(row.level)
    ffi, lib = mod.ffi, mod.lib
    batch_shape = c.shape[:-2]
    nbatch = math.prod(batch_shape)
    m, n = c.shape[-2:]
    k = a.shape[-1]
    ia, ib, ic = a.itemsize, b.itemsize, c.itemsize
    a_off, b_off, c_off = (batch_offsets(x, batch_shape) for x in (a, b, c))
    key = (row, id(mod))
    blk = _blk_cache.get(key)
    if blk is None:
        blk = ffi.new("op_blocking *", {"mc": row.mc, "kc": row.kc, "nc": row.nc})
        _blk_cache[key] = blk
    epi = ffi.NULL
    code = act_code(activation)
    if bias is not None or code:
        epi = ffi.new("op_epilogue *")
        if bias is not None:
            epi.bias = ffi.cast("const float *", bias.ctypes.data)
            epi.bias_stride = bias.strides[0] // bias.itemsize if bias.ndim else 0
            epi.bias_axis = bias_axis
        epi.act = code
    nthreads = _threads.get_num_threads()
    verbose = _verbose.enabled()
    t0 = time.perf_counter() if verbose else 0.0
    used = getattr(lib, row.symbol)(
        nbatch, m, n, k,
        ffi.cast("const float *", a.ctypes.data), _ptr(ffi, "const int64_t *", a_off),
        a.strides[-2] // ia, a.strides[-1] // ia,
        ffi.cast("const float *", b.ctypes.data), _ptr(ffi, "const int64_t *", b_off),
        b.strides[-2] // ib, b.strides[-1] // ib,
        ffi.cast("float *", c.ctypes.data), _ptr(ffi, "const int64_t *", c_off),
        c.strides[-2] // ic, c.strides[-1] // ic,
        blk, epi, nthreads)
    _stats.record(op, "float32", row.level)
    if used < 0:
        raise MemoryError(f"{row.name}: could not allocate packing buffers for {shapes or (m, n, k)}")
    if verbose:
        _verbose.emit(op, "f32:f32:f32", row.level, row.name, shapes, used, time.perf_counter() - t0)
