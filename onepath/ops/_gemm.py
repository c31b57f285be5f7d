"""Shared plumbing between the numpy front ends and the C GEMM entry points.

``run_gemm`` takes core matrices already arranged as (batch..., M, K) x (batch..., K, N) ->
(batch..., M, N) numpy views, turns their byte strides into the element strides and batch offsets
the C API wants (see kernels/api_gemm.h), and calls the selected kernel with the GIL released.
"""
from __future__ import annotations

import functools
import math
import time

import numpy as np

from .. import _stats, _threads, _verbose
from ..dispatch import registry
from ..kernels import load

_ACT = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


def activation_name(activation) -> str | None:
    """The canonical (lower-case) name of an activation: None, "relu", "gelu", "gelu_tanh" or
    "silu". String options of onepath are matched case-insensitively ("ReLU" is "relu").

    Raises:
        ValueError: an unknown name or a non-string (the message lists the valid names).
    """
    if activation is None:
        return None
    if isinstance(activation, str):
        name = activation.lower()
        if name in _ACT:
            return name
    raise ValueError(f"unknown activation {activation!r}; valid: None, "
                     + ", ".join(repr(k) for k in _ACT if k) + " (any letter case)")


def act_code(activation) -> int:
    """Map an activation name (None, "relu", "gelu", "gelu_tanh", "silu", any letter case) to
    OP_ACT_*; ValueError for an unknown name."""
    code = _ACT.get(activation) if type(activation) is str or activation is None else None
    return code if code is not None else _ACT[activation_name(activation)]


def batch_offsets(x: np.ndarray, batch_shape: tuple) -> np.ndarray | None:
    """Element offsets (int64, one per entry of ``batch_shape``, C order) of each core matrix of
    ``x`` (shape batch + 2 core dims, batch broadcastable to ``batch_shape``); None if one entry.
    The array is shared between calls with the same batch shapes and strides (read-only) up to
    OFFSETS_CACHED entries (at most 256 such arrays of 32 KiB are kept; larger ones are built per
    call, where building them is small beside the products)."""
    nb = x.ndim - 2
    entries = math.prod(batch_shape)
    if entries <= 1:
        return None
    item = x.itemsize
    key = (x.shape[:nb], tuple(s // item for s in x.strides[:nb]), tuple(batch_shape))
    return _offsets(*key) if entries <= OFFSETS_CACHED else _offsets.__wrapped__(*key)


OFFSETS_CACHED = 4096


@functools.lru_cache(maxsize=256)
def _offsets(shape: tuple, strides: tuple, batch_shape: tuple) -> np.ndarray:
    # (building them cost ~14 us per operand: 40 of the 50 us of a batched 8 x 64^3 bfloat16 call)
    nb = len(shape)
    off = np.zeros(shape, np.int64)
    for d in range(nb):
        if shape[d] > 1:
            sh = [1] * nb
            sh[d] = -1
            off = off + (np.arange(shape[d], dtype=np.int64) * strides[d]).reshape(sh)
    full = (1,) * (len(batch_shape) - nb) + shape
    out = np.ascontiguousarray(np.broadcast_to(off.reshape(full), batch_shape), np.int64).ravel()
    out.flags.writeable = False
    return out


def kernel_ready(x: np.ndarray) -> bool:
    """True when the kernels can read ``x`` in place: aligned, strides whole elements."""
    if not x.flags.aligned:
        return False
    item = x.itemsize
    for s in x.strides:
        if s % item:
            return False
    return True


def offsets_ptr(ffi, off: np.ndarray | None):
    """``const int64_t *`` to a ``batch_offsets`` array (NULL for None), by ``from_buffer``
    (~0.3 us against ~1.2 for ``ctypes.data``)."""
    return ffi.NULL if off is None else ffi.from_buffer("int64_t[]", off, require_writable=False)


def data_ptr(ffi, x: np.ndarray):
    """``float *`` to x's first element (no copy): ``from_buffer`` for C-contiguous arrays (cheap),
    else the address numpy reports (strided, transposed, negative-stride views)."""
    if x.flags.c_contiguous and x.size:
        return ffi.from_buffer("float[]", x, require_writable=False)
    return ffi.cast("float *", x.ctypes.data)


class _Bound:
    """A registry row bound to its loaded module: the C function and its blocking struct."""
    __slots__ = ("ffi", "fn", "blk")

    def __init__(self, row):
        mod = load(row.level)
        self.ffi = mod.ffi
        self.fn = getattr(mod.lib, row.symbol)
        self.blk = mod.ffi.new("op_blocking *", {"mc": row.mc, "kc": row.kc, "nc": row.nc})


_bound: dict = {}


def run_gemm(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, *, bias=None, bias_axis=1,
             activation=None, row=None, shapes: str = "") -> None:
    """C[..., M, N] = A[..., M, K] @ B[..., K, N] (+ bias, activation) with the selected kernel.

    a, b: float32 arrays (batch dims broadcastable to c's); c: float32 output, written in place.
    All three must be ``kernel_ready``. ``row`` overrides the registry selection (tests, prepack).
    """
    if row is None:
        row = registry.select(op, "float32")
    bound = _bound.get(row)
    if bound is None:
        bound = _bound[row] = _Bound(row)
    ffi = bound.ffi
    batch_shape = c.shape[:-2]
    m, n = c.shape[-2:]
    k = a.shape[-1]
    if batch_shape:
        nbatch = math.prod(batch_shape)
        offsets = [batch_offsets(x, batch_shape) for x in (a, b, c)]  # alive until the call returns
        a_off, b_off, c_off = (offsets_ptr(ffi, o) for o in offsets)
    else:
        nbatch, a_off, b_off, c_off = 1, ffi.NULL, ffi.NULL, ffi.NULL
    epi = ffi.NULL
    code = act_code(activation) if activation is not None else 0
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
    sa, sb, sc = a.strides, b.strides, c.strides
    used = bound.fn(
        nbatch, m, n, k,
        data_ptr(ffi, a), a_off, sa[-2] >> 2, sa[-1] >> 2,
        data_ptr(ffi, b), b_off, sb[-2] >> 2, sb[-1] >> 2,
        data_ptr(ffi, c), c_off, sc[-2] >> 2, sc[-1] >> 2,
        bound.blk, epi, nthreads)
    _stats.record(op, "float32", row.level, row.algorithm)
    if used < 0:
        raise MemoryError(f"{row.name}: could not allocate packing buffers for {shapes or (m, n, k)}")
    if verbose:
        shapes = shapes or "x".join(map(str, a.shape)) + ":" + "x".join(map(str, b.shape))
        _verbose.emit(op, "f32:f32:f32", row.level, row.name, shapes, used, time.perf_counter() - t0)
