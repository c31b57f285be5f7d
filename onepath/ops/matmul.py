"""``onepath.matmul``: numpy.matmul's signature and semantics. float32 runs the dispatched kernels;
the bfloat16 / mixed route (``matmul_bf16``) and a ``PackedWeight`` right operand (``matmul_packed``,
through ``linear``) are at the end of this file."""
from __future__ import annotations

import math
import time

import numpy as np
from ml_dtypes import bfloat16 as _bfloat16

from .. import _threads, _verbose
from .._repro_mode import on as _repro_on
from ..dispatch import cap as _cap
from . import _small
from ._gemm import data_ptr, kernel_ready, run_gemm
from ..dtypes import BF16, F32, result_dtype, to_bfloat16, to_float32
from ._bf16 import run_gemm_bf16
from .linear import linear
from .packed import PackedWeight

_F32 = np.dtype(np.float32)
_BF16 = np.dtype(_bfloat16)
_ND = np.ndarray
_nthreads = _threads.get_num_threads
_fast = _small.fast_matmul  # ISA level -> the small kernel's C entry (filled on first use)
_scoped_get = _cap._scoped.get
_off_get = _small._off.get  # ``_small.off()`` in force: no small-kernel shortcut (the GEMM)
_empty = np.empty
_B_MAX = _small.B_MAX
_mt_fits = _small.mt_fits


def set_mt_limits() -> None:
    """Re-read ops._small.MT_ON and its MT_MIN_FLOPS(_NN) into _MT0 / _MT8 (``_small.mt_limits``):
    the fast path's one-thread call up to these M*N*K (nn form; above them, with more than one
    thread allowed, the general path runs the small kernel on the pool: ops._small.mt_threads;
    MT_ON off: never), and forget the fast entries (matmul's and linear's), whose C functions hold
    them too. Call it after changing MT_ON."""
    global _MT0, _MT8
    _MT0, _MT8 = _small.mt_limits()
    _fast.clear()
    _small.fast_linear.clear()


set_mt_limits()
_may_share = np.may_share_memory


def _foreign(x) -> bool:
    """Objects numpy would dispatch elsewhere (ndarray subclasses, __array_ufunc__ overrides)."""
    if type(x) is np.ndarray:
        return False
    return isinstance(x, np.ndarray) or hasattr(type(x), "__array_ufunc__") or hasattr(type(x), "__array_function__")


def numpy_matmul(a, b, out=None, dtype=None):
    """numpy.matmul, with a verbose line naming it (the calls onepath does not accelerate)."""
    if not _verbose.enabled():
        return np.matmul(a, b, out=out, dtype=dtype)
    t0 = time.perf_counter()
    r = np.matmul(a, b, out=out, dtype=dtype)
    dts = ":".join(str(getattr(x, "dtype", type(x).__name__)) for x in (a, b, r))
    shp = ":".join("x".join(map(str, np.shape(x))) for x in (a, b))
    _verbose.emit("matmul", dts, "numpy", "numpy.matmul", shp, 0, time.perf_counter() - t0)
    return r


def matmul(a, b, /, out=None, *, dtype=None):
    """Matrix product with numpy.matmul semantics; float32 runs the best kernel for this host.

    Args:
        a: array_like, shape (..., M, K) or (K,).
        b: array_like, shape (..., K, N) or (K,). 1-D operands get a dimension added and removed
            afterwards; batch dimensions broadcast (stride-0 views included).
        out: optional ndarray of the result's exact shape (may be passed by position, may overlap
            the inputs). A float32 ``out`` with float32 inputs is written by the kernels.
        dtype: as in numpy.matmul. float32 inputs with dtype None or float32 run the kernels.
    Returns:
        ndarray of shape broadcast(batch) + (M, N) (with the 1-D axes removed), or ``out``. A 0-d
        result (vector times vector) is numpy's scalar (``np.float32``, an ``ml_dtypes.bfloat16``
        scalar, ...) unless ``out`` was given, as numpy.matmul returns.
    Raises:
        ValueError / TypeError: exactly where numpy.matmul raises (shape mismatch, scalars, ...);
            TypeError for a PackedWeight as the left operand.
    Every other dtype combination (and anything the kernels do not accelerate) returns
    ``numpy.matmul(a, b, out=out, dtype=dtype)`` exactly. Threads: ``onepath.set_num_threads``.
    Small float32 products (M*N*K up to a per-level limit, ``ops._small.LIMITS``) run the
    registry's ``small`` kernel, reading A and B in place: on the calling thread, or on the pool
    from about 0.1 MFLOP (the same bits at any thread count; ``ops._small.MT_ON``); batched ones
    whose core product is that small run it on every entry (entries over the threads); so do 2-D
    products with a narrow B at any size on hosts with a ``ops._small.NARROW_NN`` row (Zen 3:
    5-16 columns, from 64 rows, K up to 4096). One-row
    products with a row-major B past the host's ``ops._small.ROW_LIMITS`` (Zen 3) run the packed
    GEMM's row stream instead. Small 2-D bfloat16 products run the bfloat16 small kernel within
    both LIMITS and the level's ``ops._small.BF16_LIMITS`` (past those the bfloat16 GEMM of the
    level in force is faster).
    """
    if out is None and dtype is None:
        # small float32 products: one C call (kernels/pyfast.inc: the kernel call of the 2-D fast
        # path below, its x.T @ dy and x @ W.T routes or _batch3_fast, without their Python, the
        # same bits; None for anything it does not take)
        fast = _fast.get(_scoped_get())
        if fast is not None and not _off_get():
            c = fast[9](a, b)
            if c is not None:
                return c
    if out is None and dtype is None and type(a) is type(b) is _ND and a.dtype is b.dtype is _F32:
        # the common case first: two float32 ndarrays, no options (each check here costs ~30 ns)
        sa, sb = a.shape, b.shape
        na, nb = len(sa), len(sb)
        shape = None
        if na == 2 == nb:
            (m, k), (k2, n) = sa, sb
            shape = (m, n)
        # a matrix times a vector, and a vector times a matrix: the kernel call of the 2-D product
        # with the vector as a (K, 1) or (1, K) matrix (its bits), the 1-D result written in place
        # (the general path's shape handling cost ~7 us a call; an exception to leave the 2-D
        # unpacking, ~0.6 us)
        elif na == 2 and nb == 1:
            (m, k), (k2,), n = sa, sb, 1
            shape = (m,)
        elif na == 1 and nb == 2:
            m, (k,), (k2, n) = 1, sa, sb
            shape = (n,)
        elif na == 3 == nb:
            r = _batch3_fast(a, b)
            if r is not None:
                return r
        elif na == 1 == nb:
            # a vector dot product within the small limits: the 2-D call's kernel call (one
            # thread at any count, as there: kernels/gemm_small.c op_small_dot), numpy's scalar
            # (the general path cost ~15 us a call: zen3, K 4096, numpy 3)
            fast = _fast.get(_scoped_get())
            k = sa[0]
            if fast is not None and 0 < k == sb[0] and k <= fast[4] and not _off_get():
                c = _empty((), _F32)
                try:
                    if fast[0](1, 1, k, fast[1](a), fast[1](b), fast[1](c)):
                        return c[()]
                except ValueError:  # not contiguous
                    pass
        if shape is not None:
            # small and C-contiguous (from_buffer refuses anything else): the small kernel,
            # found by the scoped cap in force (ops/_small.py; empty while verbose is on and once
            # the reproducible mode was ever used, so this path needs no test of that mode)
            fast = _fast.get(_scoped_get())
            if fast is not None and k2 == k and not _off_get():
                cc, fb, mt, null, lim, lim1t, row_kn, row_n, row_k, _ = fast
                mnk = m * n * k
                if (mnk <= lim or (mnk <= lim1t and k * n <= _B_MAX
                                   and (_nthreads() == 1 or _mt_fits(mnk, m)))) and (
                        m != 1 or k * n < row_kn or n < row_n or k < row_k):  # (ROW_LIMITS)
                    c = _empty(shape, _F32)
                    # threads: ops._small.mt_threads
                    t = 1 if mnk < _MT0 or (m >= 8 and mnk < _MT8) else _nthreads()
                    try:
                        if t == 1:
                            if cc(m, n, k, fb(a), fb(b), fb(c)):
                                return c
                        elif a.flags.aligned and b.flags.aligned:  # (cc checks; mt does not)
                            mt(m, n, k, fb(a), k, 1, fb(b), n, 1, fb(c), n, 1, null, t)
                            return c
                    except ValueError:  # not C-contiguous
                        if (na == 2 == nb and a.flags.f_contiguous and b.flags.c_contiguous
                                and a.flags.aligned and b.flags.aligned):
                            # A = X.T (e.g. x.T @ dy): the call _small_strided makes (the same
                            # bits), without the general path's ~12 us of Python (zen3, 64^3)
                            mt(m, n, k, fb(a.T), 1, m, fb(b), n, 1, fb(c), n, 1, null, t)
                            return c
        if a.ndim and b.ndim and not _repro_on():
            if a.ndim == 2 and b.ndim == 2 and b.flags.f_contiguous and not b.flags.c_contiguous:
                # B = W.T: linear's small entry on W (the same kernel call as _small_strided's, so
                # the same bits; None when the product is not small, verbose is on, ...). A B
                # that is both (one column or one row) is the nn form's, as on the fast entry
                # above: the same call gives the same bits whether that entry is filled or not.
                r = _small.linear_fast(a, b.T, None, 0, None)
                if r is not None:
                    return r
            return _matmul_f32(a, b, None)
    elif (dtype is None and type(out) is type(a) is type(b) is _ND and out.dtype is a.dtype is b.dtype is _F32
            and out.ndim == a.ndim == b.ndim == 2):
        # the same small kernel into a given float32 ``out`` that overlaps neither operand (else the
        # general path below, which writes through a copy)
        fast = _fast.get(_scoped_get())
        (m, k), (k2, n) = a.shape, b.shape
        if (fast is not None and k2 == k and not _off_get() and out.shape == (m, n)
                and out.flags.writeable and not _may_share(out, a) and not _may_share(out, b)):
            cc, fb, mt, null, lim, lim1t, row_kn, row_n, row_k, _ = fast
            mnk = m * n * k
            if (mnk <= lim or (mnk <= lim1t and k * n <= _B_MAX
                               and (_nthreads() == 1 or _mt_fits(mnk, m)))) and (
                    m != 1 or k * n < row_kn or n < row_n or k < row_k):
                t = 1 if mnk < _MT0 or (m >= 8 and mnk < _MT8) else _nthreads()
                try:
                    if t == 1:
                        if cc(m, n, k, fb(a), fb(b), fb(out)):
                            return out
                    elif a.flags.aligned and b.flags.aligned and out.flags.aligned:
                        # the threaded kernel, as on the entry above (the general path cost ~20
                        # us of Python a call: 128^3 at 2 threads, zen3, 2026-12-07)
                        mt(m, n, k, fb(a), k, 1, fb(b), n, 1, fb(out), n, 1, null, t)
                        return out
                except ValueError:  # not C-contiguous
                    pass
    elif (dtype is None and type(a) is type(b) is _ND and a.dtype is b.dtype is _BF16
            and a.ndim == 2 and b.ndim == 2 and not _repro_on()):
        r = None
        if out is None:
            r = _small.matmul_bf16(a, b, True)  # small bfloat16 products: the small kernel, in place
        if r is None and (out is None or (type(out) is _ND and out.dtype is _BF16 and out.ndim == 2)):
            r = matmul_bf16_2d(a, b, out)  # the GEMM with no other step (None: the path below)
        if r is not None:
            return r
    if _repro_on():  # onepath.reproducible(): ops/_repro.py
        from ._repro import matmul as _rm
        return _rm(a, b, out, dtype)
    if isinstance(out, tuple):
        if len(out) != 1:
            return numpy_matmul(a, b, out, dtype)
        out = out[0]
    if isinstance(b, PackedWeight):  # a prepacked weight: a @ weight.T (matmul_packed below)
        return matmul_packed(a, b, out, dtype)
    if isinstance(a, PackedWeight):
        raise TypeError("matmul: a PackedWeight is accepted as the right operand only "
                        "(matmul(x, packed) = x @ weight.T); unpack it with packed.weight()")
    if (_foreign(a) or _foreign(b)
            or (out is not None and (type(out) is not np.ndarray or not out.flags.writeable))):
        return numpy_matmul(a, b, out, dtype)
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if (a_arr.dtype is _F32 and b_arr.dtype is _F32 and dtype is None and out is None
            and 0 < a_arr.ndim <= 32 and 0 < b_arr.ndim <= 32):
        return _matmul_f32(a_arr, b_arr, None)  # the common case, without the checks below
    if a_arr.dtype == BF16 or b_arr.dtype == BF16:  # bfloat16 and mixed (matmul_bf16 below)
        return matmul_bf16(a_arr, b_arr, out, dtype)
    if (a_arr.dtype != _F32 or b_arr.dtype != _F32 or not 0 < a_arr.ndim <= 32 or not 0 < b_arr.ndim <= 32
            or (dtype is not None and np.dtype(dtype) != _F32)
            or (out is not None and out.dtype != _F32)):
        return numpy_matmul(a, b, out, dtype)
    return _matmul_f32(a_arr, b_arr, out)


def core_shapes(a: np.ndarray, b: np.ndarray):
    """(a2, b2, batch_shape, result_shape) for matmul, or None when numpy must raise the error."""
    a2 = a[np.newaxis, :] if a.ndim == 1 else a
    b2 = b[:, np.newaxis] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        return None
    if a2.ndim == 2 and b2.ndim == 2:
        batch = ()
    else:
        try:
            batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        except ValueError:
            return None
    shape = batch + (a2.shape[-2], b2.shape[-1])
    result = shape
    if a.ndim == 1 and b.ndim == 1:
        result = batch
    elif a.ndim == 1:
        result = batch + (b2.shape[-1],)
    elif b.ndim == 1:
        result = batch + (a2.shape[-2],)
    return a2, b2, batch, shape, result


def core_view(res: np.ndarray, a_ndim: int, b_ndim: int) -> np.ndarray:
    """The (..., M, N) view of a matmul result: the axes removed for 1-D operands put back (size 1)."""
    if a_ndim == 1 and b_ndim == 1:
        return res[..., np.newaxis, np.newaxis]
    if a_ndim == 1:
        return res[..., np.newaxis, :]
    if b_ndim == 1:
        return res[..., np.newaxis]
    return res


def _matmul_f32(a, b, out):
    shapes = core_shapes(a, b)
    if shapes is None:
        return numpy_matmul(a, b, out)  # numpy raises its own error (or broadcasts into out)
    a2, b2, batch, shape, result = shapes
    if out is not None and out.shape != result:
        return numpy_matmul(a, b, out)  # numpy raises its own error (or broadcasts into out)
    res = np.empty(result, _F32) if out is None else out
    c = core_view(res, a.ndim, b.ndim)
    k = a2.shape[-1]
    if c.size == 0 or k == 0:
        c[...] = 0
        if _verbose.enabled():
            _verbose.emit("matmul", "f32:f32:f32", "none", "fill_zero", _shape_text(a2, b2), 0, 0.0)
        return res[()] if out is None and not result else res
    if not kernel_ready(a2):
        a2 = np.array(a2, _F32)  # unaligned or odd strides: numpy's own BLAS path copies too
    if not kernel_ready(b2):
        b2 = np.array(b2, _F32)
    # (a result allocated here shares memory with nothing)
    direct = out is None or (kernel_ready(c) and not np.may_share_memory(c, a2)
                             and not np.may_share_memory(c, b2)
                             and (not batch or _batch_stride(c, batch) is not None))
    target = c if direct else np.empty(shape, _F32)
    # the small kernel's nt form (op_gemm_f32_small: B's rows strided, its columns contiguous, A's
    # rows contiguous): its depth for use_small; C's rows strided: the dot products at any depth
    strides = (_core_strides(a2), _core_strides(b2), _core_strides(c))
    nn, nt = _forms(strides)
    csc = strides[2][1]
    m, n = a2.shape[-2], b2.shape[-1]
    nt_k = None if not nt else k if csc == 1 else _small.NT_K_DOTS
    # neither form (e.g. A and B both column-major, or C's rows strided): the small kernel's
    # reference loop, only for the tiniest products (_small.ANY_MAX)
    if target is c and (nn or nt or m * n * k <= _small.ANY_MAX) and (
            _small.use_small_batched(m * n * k, n * k, m, nt_k,
                                     n if math.prod(batch) == 1 else None) if batch
            else _small.use_small(m * n * k, kn=n * k, m=m, nt_k=nt_k, n=n)):
        if batch:
            _small_batch(a2, b2, c)  # each core product small: the small kernel on each
        else:
            _small_strided(a2, b2, c, strides)
    else:
        run_gemm("matmul", a2, b2, target)
    if target is not c:
        c[...] = target
    return res[()] if out is None and not result else res  # 0-d: numpy's scalar


def _forms(strides) -> tuple[bool, bool]:
    """(nn, nt): whether the small kernel reads a product of these (row, column) strides of A, B
    and C (``_core_strides``) in its nn form (B's and C's rows contiguous) or its nt form (B = W.T:
    B's columns and A's rows contiguous); neither: its reference loop (``_small.ANY_MAX``)."""
    (_, csa), (rsb, csb), (_, csc) = strides
    nn = csb == 1 and csc == 1
    return nn, not nn and csa == 1 and rsb == 1


def small_form(a: np.ndarray, b: np.ndarray) -> str:
    """"nn", "nt" or "any": the small kernel's form (``_forms``) for float32 ``a @ b`` into a new
    C-ordered result, with the operands as ``matmul`` would read them (a copy of one the kernels
    cannot read in place is C-ordered). ``onepath.dask`` decides a block's path by it: a block of
    an in-memory operand has that operand's layout."""
    sa = _core_strides(a) if kernel_ready(a) else (a.shape[-1], 1)
    sb = _core_strides(b) if kernel_ready(b) else (b.shape[-1], 1)
    nn, nt = _forms((sa, sb, (b.shape[-1], 1)))
    return "nn" if nn else "nt" if nt else "any"


def _core_strides(x):
    """(row, column) strides of x's core matrix in elements, a size-1 axis's taken as a C-contiguous
    matrix's (numpy's contiguity flags ignore it too): every route then picks the same form."""
    r, c = x.shape[-2:]
    cs = x.strides[-1] // x.itemsize if c > 1 else 1
    return (x.strides[-2] // x.itemsize if r > 1 else c * cs), cs


def _batch_stride(x, bshape):
    """Elements from one core matrix of ``x`` (..., R, C) to the next when its batch axes,
    broadcast to ``bshape``, are walked in C order, or None when no one stride does that."""
    nb, xb = len(bshape), x.ndim - 2
    st = [0] * (nb - xb) + [x.strides[i] // x.itemsize if x.shape[i] > 1 else 0 for i in range(xb)]
    s, span = None, 1
    for d in range(nb - 1, -1, -1):
        if bshape[d] > 1:
            if s is None:
                s = st[d]
            elif st[d] != s * span:
                return None
        span *= bshape[d]
    return 0 if s is None else s


def _walked(x, bshape):
    """(x, its batch stride): x itself when one stride walks its entries (``_batch_stride``), else x
    broadcast to ``bshape`` and copied, each core matrix keeping its order (rows or columns
    contiguous), so that the small kernel takes the form it takes on x's own entries (as
    onepath.dask's blocks of x do)."""
    s = _batch_stride(x, bshape)
    if s is not None:
        return x, s
    full = np.broadcast_to(x, tuple(bshape) + x.shape[-2:])
    rs, cs = _core_strides(x)
    if cs != 1 and rs == 1:  # columns contiguous (B = W.T)
        y = np.ascontiguousarray(np.swapaxes(full, -1, -2)).swapaxes(-1, -2)
    else:
        y = np.ascontiguousarray(full)
    return y, _batch_stride(y, bshape)


def _batch3_fast(a, b):
    """matmul of C-contiguous, aligned 3-D float32 a (B, M, K) and b (B, K, N) (C-contiguous, or
    the transpose of its last two axes is: ``W.transpose(0, 2, 1)``), B >= 2, whose
    core products take the small kernel (``_small.use_small_batched``): the kernel call
    ``_small_batch`` makes for them (the same arguments, the same bits) without the general path's
    checks (~9 of the 46 us of 8 x 64^3 at 1 thread); None for anything else. Like the 2-D fast
    path, only while ``_small.fast_matmul`` holds the level's entry (verbose off, no reproducible
    mode ever)."""
    if _fast.get(_scoped_get()) is None:
        return None
    (nb, m, k), (nb2, k2, n) = a.shape, b.shape
    if (nb2 != nb or k2 != k or nb < 2 or not (m and n and k)
            or not (a.flags.c_contiguous and a.flags.aligned and b.flags.aligned)):
        return None
    if b.flags.c_contiguous:
        bc, rsb, csb, nt_k = b, n, 1, None
    else:  # B = W.transpose(0, 2, 1) of a C-contiguous W (attention's q @ k^T): the nt form
        bc, rsb, csb, nt_k = b.transpose(0, 2, 1), 1, k, k
        if not bc.flags.c_contiguous:
            return None
    if not _small.use_small_batched(m * n * k, n * k, m, nt_k):   # (nb >= 2: no ROW_LIMITS)
        return None
    bd = _small.bound("matmul")
    fb = bd.fb
    c = _empty((nb, m, n), _F32)
    bd.batch(nb, m, n, k, fb(a), m * k, k, 1, fb(bc), k * n, rsb, csb, fb(c), m * n, n, 1,
             _small.mt_threads(m, nb * m * n * k, False))
    return c


def _small_batch(a, b, c):
    """The small kernel on every core product of batched float32 views a (..., M, K), b (..., K,
    N) (batch axes broadcast, whole-element strides) into c (..., M, N) (its batch axes walked by
    one stride: a result matmul allocated, or an ``out`` written through such a copy): whole
    entries over the threads (op_gemm_f32_small_batch). Each entry's bits are its 2-D call's; an
    operand whose batch axes no single stride walks is copied first (_walked)."""
    bshape = c.shape[:-2]
    (a, bsa), (b, bsb) = _walked(a, bshape), _walked(b, bshape)
    bsc = _batch_stride(c, bshape)
    bd = _small.bound("matmul")
    ffi = bd.ffi
    nb = math.prod(bshape)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    t0 = time.perf_counter()
    (rsa, csa), (rsb, csb), (rsc, csc) = (_core_strides(x) for x in (a, b, c))
    t = _small.mt_threads(m, nb * m * n * k, False)
    used = bd.batch(nb, m, n, k, data_ptr(ffi, a), bsa, rsa, csa, data_ptr(ffi, b), bsb, rsb, csb,
                    data_ptr(ffi, c), bsc, rsc, csc, t)
    if _verbose.enabled():
        _small.emit("matmul", bd, _shape_text(a, b), t0, used)


def _small_strided(a, b, c, strides):
    """The small kernel on 2-D float32 views a (m, k), b (k, n) into c (m, n) with any
    (whole-element) strides; ``strides``: their (row, column) strides by ``_core_strides``."""
    bd = _small.bound("matmul")
    ffi = bd.ffi
    m, k = a.shape
    n = b.shape[1]
    t0 = time.perf_counter()
    (rsa, csa), (rsb, csb), (rsc, csc) = strides
    t = _small.mt_threads(m, m * n * k, csb == 1 and csc == 1)
    fb = bd.fb
    if t == 1 and a.flags.c_contiguous and b.flags.c_contiguous and c.flags.c_contiguous:
        # the contiguous entry takes untyped buffers: far cheaper than three ctypes.data casts
        if bd.cc(m, n, k, fb(a), fb(b), fb(c)):
            if _verbose.enabled():
                _small.emit("matmul", bd, _shape_text(a, b), t0)
            return

    def ptr(x):  # (all three are kernel_ready: aligned, whole-element strides)
        fl = x.flags
        if fl.c_contiguous:
            return fb(x)
        # an F-contiguous x (B = W.T): its transpose is C-contiguous and starts at the same byte
        return fb(x.T) if fl.f_contiguous else ffi.cast("float *", x.ctypes.data)
    used = bd.mt(m, n, k, ptr(a), rsa, csa, ptr(b), rsb, csb, ptr(c), rsc, csc, bd.null, t)
    if _verbose.enabled():
        _small.emit("matmul", bd, _shape_text(a, b), t0, used)


def _shape_text(a, b) -> str:
    return "x".join(map(str, a.shape)) + ":" + "x".join(map(str, b.shape))


# ------------------------------------------------------------------------------------------------
# the prepacked and bfloat16 routes

def matmul_packed(a, p: PackedWeight, out=None, dtype=None):
    """``matmul(a, packed)``: a @ weight.T through ``linear`` (no bias)."""
    a_arr = np.asarray(a)
    if a_arr.ndim == 0:
        raise ValueError("matmul: Input operand 0 does not have enough dimensions")
    if a_arr.shape[-1] != p.shape[1]:  # numpy's wording: the packed operand stands for weight.T
        raise ValueError(f"matmul: Input operand 1 (a PackedWeight, weight.T of shape "
                         f"{p.shape[1], p.shape[0]}) has a mismatch in its core dimension 0 (size "
                         f"{p.shape[1]} is different from {a_arr.shape[-1]})")
    y = linear(a_arr, p, dtype=dtype)
    if out is not None:
        if out.shape != y.shape:
            raise ValueError(f"matmul: out has shape {out.shape}, result has {y.shape}")
        out[...] = y
        return out
    return y


def matmul_bf16_2d(a: np.ndarray, b: np.ndarray, out):
    """matmul of two 2-D bfloat16 ndarrays (M x K, K x N; K, M, N >= 1) into ``out`` (a 2-D bfloat16
    ndarray, or None: a new one), the GEMM called with no other step; None when any is not
    kernel-ready, ``out`` is read-only, of another shape or overlaps an operand, or a size is 0 (the
    general path ``matmul_bf16`` then decides, errors included)."""
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or not (k and m and n) or not (kernel_ready(a) and kernel_ready(b)):
        return None
    if out is None:
        out = np.empty((m, n), BF16)
    elif (out.shape != (m, n) or not out.flags.writeable or not kernel_ready(out)
          or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return None
    run_gemm_bf16("matmul", a, b, out, shapes=lambda: f"{m}x{k}:{k}x{n}")
    return out


def matmul_bf16(a: np.ndarray, b: np.ndarray, out, dtype):
    """matmul with at least one bfloat16 operand (the other bfloat16 or float32), numpy semantics
    otherwise; anything else returns numpy.matmul's answer."""
    rd = result_dtype(a.dtype, b.dtype, dtype)
    if (out is None and rd is not None and a.dtype == BF16 and b.dtype == BF16 and a.ndim == 2
            and b.ndim == 2):
        r = _small.matmul_bf16(a, b, rd == BF16)  # small problems: the small kernel, in place
        if r is not None:
            return r
    if rd is None or a.ndim == 0 or b.ndim == 0 or (out is not None and out.dtype != rd):
        return numpy_matmul(a, b, out, dtype)
    if not (a.dtype == BF16 and b.dtype == BF16):
        # bf16 x f32 -> f32: the bfloat16 operand widened exactly, the float32 GEMM
        a32 = to_float32(a) if a.dtype == BF16 else a
        b32 = to_float32(b) if b.dtype == BF16 else b
        if rd == F32:
            return _matmul_f32(a32, b32, out)
        r = _matmul_f32(a32, b32, None)
        r = to_bfloat16(r)
        if out is None:
            return r[()] if r.ndim == 0 else r  # 0-d: numpy's (ml_dtypes') scalar
        out[...] = r
        return out
    shapes = core_shapes(a, b)
    if shapes is None:
        return numpy_matmul(a, b, out, dtype)  # numpy raises its own error
    a2, b2, batch, shape, result = shapes
    if out is not None and out.shape != result:
        return numpy_matmul(a, b, out, dtype)
    res = np.empty(result, rd) if out is None else out
    scalar = out is None and not result  # 0-d: numpy's (ml_dtypes') scalar
    c = core_view(res, a.ndim, b.ndim)
    if c.size == 0:
        return res
    if a2.shape[-1] == 0:
        c[...] = 0
        return res[()] if scalar else res
    a2 = a2 if kernel_ready(a2) else np.array(a2, BF16)
    b2 = b2 if kernel_ready(b2) else np.array(b2, BF16)
    # (a result allocated here shares memory with nothing)
    direct = out is None or (kernel_ready(c) and not np.may_share_memory(c, a2)
                             and not np.may_share_memory(c, b2))
    target = c if direct else np.empty(shape, rd)
    run_gemm_bf16("matmul", a2, b2, target,
                  shapes="x".join(map(str, a2.shape)) + ":" + "x".join(map(str, b2.shape)))
    if target is not c:
        c[...] = target
    return res[()] if scalar else res
