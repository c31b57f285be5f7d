"""The reproducible mode of ``matmul``, ``linear`` and ``conv2d`` / ``conv1d`` (``onepath.reproducible()``).

Guarantee: for the same float32 / bfloat16 inputs, the result bits are the same at every ISA level,
every thread count and on Intel and AMD CPUs (x86-64, the same onepath version), because:
- every output element is ONE float32 fused-multiply-add chain over the reduction index in
  increasing order: the first product rounded once, then acc = fma(a[k], b[k], acc) (kernels/repro.c; the blocking, the micro-kernel shape, the vector width
  and the threads do not change it: threads split M, N and batches only);
- bfloat16 operands are widened exactly (subnormals kept; no VDPBF16PS, no AMX), so a bfloat16
  result is the float32 result rounded once to nearest even;
- convolutions of every algorithm (1x1, implicit GEMM, grouped, depthwise) and both layouts reduce
  in one canonical order, (c, kh, kw) with kw fastest, padding included as zeros: an im2col of the
  input in that order, then the reproducible GEMM;
- bias (one float32 addition after the chain) and activations run one scalar code path whose
  transcendental functions are onepath's own (double precision, explicit fma), not libm's.
Not guaranteed: NaN payloads and the sign of a NaN (the NaN-ness is); results equal to the default
mode's (they differ in the last bits); float64 and other dtypes (numpy computes them, as in the
default mode); results across onepath versions that change this file or kernels/repro.c.
Cost: the GEMM runs at about the default float32 speed (same driver and register blocking); bfloat16
runs at float32 speed (no bfloat16 hardware); convolutions pay an explicit im2col in numpy.
"""
from __future__ import annotations

import time

import numpy as np

from .. import _stats, _threads, _verbose
from ..dispatch import registry
from ..dtypes import BF16, F32, result_dtype
from ..kernels import load
from ._gemm import act_code, batch_offsets, kernel_ready

_TAG = {F32: "f32", BF16: "bf16"}


class _Bound:
    __slots__ = ("ffi", "lib", "blk", "name", "level")

    def __init__(self, row):
        mod = load(row.level)
        self.ffi, self.lib, self.level = mod.ffi, mod.lib, row.level
        self.blk = mod.ffi.new("op_blocking *", {"mc": row.mc, "kc": row.kc, "nc": row.nc})
        self.name = mod.ffi.string(mod.lib.op_repro_kernel_name()).decode()


_bound: dict = {}


def _current() -> _Bound:
    row = registry.select("matmul", "float32")  # the level in force and its float32 blocking
    b = _bound.get(row)
    if b is None:
        b = _bound[row] = _Bound(row)
    return b


def kernel_name(level: str | None = None) -> str:
    """Name of the reproducible micro-kernel at ``level`` (default: the level in force)."""
    if level is None:
        return _current().name
    mod = load(level)
    return mod.ffi.string(mod.lib.op_repro_kernel_name()).decode()


def _ptr(ffi, arr, ctype="void *"):
    return ffi.NULL if arr is None else ffi.cast(ctype, arr.ctypes.data)


def _operand(x: np.ndarray) -> np.ndarray:
    """float32 / bfloat16 kept as they are (the kernel widens bfloat16 exactly), anything else to
    float32 (numpy's rounding); copied when the kernel cannot read it in place."""
    if x.dtype != F32 and x.dtype != BF16:
        return np.asarray(x, F32)
    return x if kernel_ready(x) else np.array(x)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, bd: _Bound | None = None) -> int:
    """c[..., M, N] = a[..., M, K] @ b[..., K, N] in reproducible arithmetic (batch dims of a and b
    broadcast to c's). a, b float32 or bfloat16 (any strides); c float32, written in place.
    Returns the threads used. Raises MemoryError when packing buffers cannot be allocated."""
    bd = bd or _current()
    a, b = _operand(a), _operand(b)
    ffi = bd.ffi
    batch_shape = c.shape[:-2]
    m, n = c.shape[-2:]
    k = a.shape[-1]
    offs = [batch_offsets(x, batch_shape) for x in (a, b, c)] if batch_shape else [None] * 3
    nbatch = int(np.prod(batch_shape)) if batch_shape else 1
    sa, sb, sc = a.strides, b.strides, c.strides
    used = bd.lib.op_repro_gemm(
        nbatch, m, n, k,
        _ptr(ffi, a), _ptr(ffi, offs[0], "const int64_t *"), sa[-2] // a.itemsize, sa[-1] // a.itemsize,
        int(a.dtype == BF16),
        _ptr(ffi, b), _ptr(ffi, offs[1], "const int64_t *"), sb[-2] // b.itemsize, sb[-1] // b.itemsize,
        int(b.dtype == BF16),
        _ptr(ffi, c, "float *"), _ptr(ffi, offs[2], "const int64_t *"), sc[-2] // 4, sc[-1] // 4,
        bd.blk, _threads.get_num_threads())
    if used < 0:
        raise MemoryError(f"reproducible GEMM: could not allocate packing buffers for m={m} n={n} k={k}")
    return used


def epilogue(y: np.ndarray, bias, bias_axis: int, activation, out_dtype, bd: _Bound | None = None) -> np.ndarray:
    """Bias, activation and the bfloat16 rounding on a C-contiguous float32 ``y`` viewed as
    (batch, m, n) (its last two axes; bias of length m (axis 0) or n (axis 1), the same for every
    batch entry). Returns y (float32, in place) or a new bfloat16 array of y's shape."""
    code = act_code(activation)
    out16 = np.empty(y.shape, BF16) if out_dtype == BF16 else None
    if bias is None and code == 0 and out16 is None:
        return y
    bd = bd or _current()
    ffi = bd.ffi
    m, n = (y.shape[-2], y.shape[-1]) if y.ndim >= 2 else (1, y.shape[-1] if y.ndim else 1)
    nb = y.size // max(m * n, 1) if y.size else 0
    offs = np.arange(nb, dtype=np.int64) * (m * n) if nb > 1 else None
    b = None if bias is None else np.ascontiguousarray(bias, F32)
    bd.lib.op_repro_epilogue(nb, m, n, _ptr(ffi, y, "float *"), _ptr(ffi, offs, "const int64_t *"), n, 1,
                             _ptr(ffi, b, "const float *"), ffi.NULL, 1, bias_axis, code,
                             _ptr(ffi, out16, "uint16_t *"), _threads.get_num_threads())
    return y if out16 is None else out16


def _emit(op, dts, bd, shapes, threads, t0):
    _stats.record("repro_" + op, "float32", bd.level)
    if _verbose.enabled():
        _verbose.emit(op, dts, bd.level, bd.name + "(reproducible)", shapes, threads,
                      time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------------
# matmul

def matmul(a, b, out=None, dtype=None):
    """``onepath.matmul`` in reproducible mode (same arguments, results and errors)."""
    from .packed import PackedWeight
    from .matmul import _foreign, core_shapes, core_view, numpy_matmul
    if isinstance(out, tuple):
        if len(out) != 1:
            return numpy_matmul(a, b, out, dtype)
        out = out[0]
    if isinstance(a, PackedWeight):
        raise TypeError("matmul: a PackedWeight is accepted as the right operand only "
                        "(matmul(x, packed) = x @ weight.T); unpack it with packed.weight()")
    if isinstance(b, PackedWeight):
        b.check_cap()  # the default mode's rule (this mode reads the unpacked weight)
        b = b.weight().T
    if (_foreign(a) or _foreign(b)
            or (out is not None and (type(out) is not np.ndarray or not out.flags.writeable))):
        return numpy_matmul(a, b, out, dtype)
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if (a_arr.dtype == F32 and b_arr.dtype == F32 and dtype is not None
            and np.dtype(dtype) != F32):  # as the default mode: numpy's answer (or its error)
        return numpy_matmul(a, b, out, dtype)
    rd = result_dtype(a_arr.dtype, b_arr.dtype, dtype)
    if rd is None or a_arr.ndim == 0 or b_arr.ndim == 0 or (out is not None and out.dtype != rd):
        return numpy_matmul(a, b, out, dtype)
    shapes = core_shapes(a_arr, b_arr)
    if shapes is None:
        return numpy_matmul(a_arr, b_arr, out, dtype)  # numpy raises its own error
    a2, b2, batch, shape, result = shapes
    if out is not None and out.shape != result:
        return numpy_matmul(a_arr, b_arr, out, dtype)
    t0 = time.perf_counter()
    bd = _current()
    res = np.empty(result, rd) if out is None else out
    view = core_view(res, a_arr.ndim, b_arr.ndim)
    direct = (rd == F32 and kernel_ready(view)
              and (out is None or not (np.may_share_memory(out, a_arr) or np.may_share_memory(out, b_arr))))
    c = view if direct else np.empty(shape, F32)
    used = gemm(a2, b2, c, bd) if c.size else 1
    if not direct:
        view[...] = epilogue(c, None, 1, None, rd, bd)
    _emit("matmul", f"{_TAG.get(a_arr.dtype)}:{_TAG.get(b_arr.dtype)}:{_TAG[rd]}", bd,
          "x".join(map(str, a2.shape)) + ":" + "x".join(map(str, b2.shape)), used, t0)
    return res[()] if out is None and not result else res  # 0-d: numpy's scalar, as the default mode


# ------------------------------------------------------------------------------------------------
# linear

def linear(x, weight, bias=None, activation=None, dtype=None):
    """``onepath.linear`` in reproducible mode (same arguments, results and errors)."""
    from .linear import _KERNEL_BIAS, _act_numpy, bias_array
    from .packed import PackedWeight
    act_code(activation)
    if isinstance(weight, PackedWeight):
        weight.check_cap()  # the default mode's rule (this mode reads the unpacked weight)
    w = weight.weight() if isinstance(weight, PackedWeight) else np.asarray(weight)
    xa = np.asarray(x)
    if xa.ndim < 1:
        raise ValueError("linear: x must have at least one dimension (..., in_features)")
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be (out_features, in_features), got shape {w.shape}")
    n, k = w.shape
    if xa.shape[-1] != k:
        raise ValueError(f"linear: x has {xa.shape[-1]} features, weight expects {k} (weight shape {w.shape})")
    braw = None if bias is None else bias_array(bias, n)  # the default mode's shapes and errors
    rd = result_dtype(xa.dtype, w.dtype, dtype)
    if braw is not None and braw.dtype not in _KERNEL_BIAS:
        rd = None  # a float64, complex, integer, ... bias promotes: numpy's expression, as the default mode
    if rd is None:  # not float32 / bfloat16: numpy, as the default mode
        if dtype is not None and np.dtype(dtype) not in (F32, BF16) and xa.dtype in (F32, BF16):
            raise TypeError(f"linear: dtype must be float32 or bfloat16, got {np.dtype(dtype)}")
        y = np.matmul(xa, w.T)
        if bias is not None:
            y = y + bias  # as given: numpy's promotion (a Python scalar stays weak)
        y = _act_numpy(y, activation)
        return y.astype(dtype) if dtype is not None else y
    b = None if braw is None else np.ascontiguousarray(np.broadcast_to(braw.reshape(-1), (n,)), F32)
    lead = xa.shape[:-1]
    m = int(np.prod(lead)) if lead else 1
    x2 = xa.reshape(m, k)
    if m == 0 or n == 0:
        return np.empty(lead + (n,), rd)
    t0 = time.perf_counter()
    bd = _current()
    c = np.empty((m, n), F32)
    used = gemm(x2, w.T, c, bd)
    y = epilogue(c, b, 1, activation, rd, bd)
    _emit("linear", f"{_TAG[xa.dtype]}:{_TAG[w.dtype]}:{_TAG[rd]}", bd, f"{m}x{k}:{n}x{k}", used, t0)
    return y.reshape(lead + (n,))


# ------------------------------------------------------------------------------------------------
# convolution

def im2col(x4: np.ndarray, kh: int, kw: int, oh: int, ow: int, stride, pads, dilation) -> np.ndarray:
    """Columns of an NCHW input (any strides) in the canonical reduction order: an array
    (N, C, KH, KW, OH, OW) of x4's dtype whose entry [n, c, i, j, y, x] is the padded input at row
    y*sh + i*dh - top, column x*sw + j*dw - left (zero in the padding)."""
    (pt, pb), (pl, pr) = pads
    xp = x4 if not (pt or pb or pl or pr) else np.pad(x4, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    sh, sw = stride
    dh, dw = dilation
    cols = np.empty(x4.shape[:2] + (kh, kw, oh, ow), x4.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                                  j * dw: j * dw + (ow - 1) * sw + 1: sw]
    return cols


def conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, nd):
    """``onepath.conv2d`` / ``conv1d`` in reproducible mode (same arguments, results and errors).
    The default front end validates the arguments on an empty batch (its errors, its result dtype
    and output shape); float64 results go to its float64 reference, as in the default mode."""
    from . import conv as dc
    x, w = np.asarray(input), np.asarray(weight)
    ok_layout = isinstance(layout, str) and layout.upper() in dc._LAYOUTS[nd]
    if not ok_layout or x.ndim not in (nd + 1, nd + 2) or w.ndim != nd + 2:
        return dc._conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, nd)
    unbatched = x.ndim == nd + 1
    xb = x[np.newaxis] if unbatched else x
    try:
        with _verbose.muted():  # (the argument check: no line of its own)
            probe = dc._conv(xb[:0], w, bias, stride, padding, dilation, groups, layout, activation,
                             dtype, nd)
    except (ValueError, TypeError) as exc:  # the message of the real input (its batch size), then this
        dc._conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, nd)
        raise exc
    out_dt = probe.dtype
    if out_dt != F32 and out_dt != BF16:
        return dc._conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, nd)
    nhwc = dc._LAYOUTS[nd][layout.upper()]
    if nd == 1:
        xb = xb[:, np.newaxis] if nhwc else xb[:, :, np.newaxis]
        w = w[:, :, np.newaxis, :]
    x4 = xb.transpose(0, 3, 1, 2) if nhwc else xb  # an NCHW view
    n, c = x4.shape[:2]
    oc, cg, kh, kw = w.shape
    g = dc._int(groups, "groups")
    st, dl = dc._pair(stride, nd, "stride"), dc._pair(dilation, nd, "dilation")
    pads = dc._padding(padding, nd, w.shape[2:] if nd == 2 else (kw,), dl, st)
    if nd == 1:
        st, dl, pads = (1,) + st, (1,) + dl, ((0, 0),) + pads
    ps = probe.shape
    oh, ow = (ps[1], ps[2]) if nhwc and nd == 2 else (ps[2], ps[3]) if nd == 2 else (1, ps[1] if nhwc else ps[2])
    yshape = (n, oh, ow, oc) if nhwc else (n, oc, oh, ow)
    if n == 0 or oh == 0 or ow == 0:
        return dc._unshape(np.empty(yshape, out_dt), nd, nhwc, unbatched)
    t0 = time.perf_counter()
    bd = _current()
    cols = im2col(_operand(x4), kh, kw, oh, ow, st, pads, dl)
    kg, ocg, ohw = cg * kh * kw, oc // g, oh * ow
    wg = np.ascontiguousarray(_operand(w)).reshape(1, g, ocg, kg)
    colg = cols.reshape(n, g, kg, ohw)
    y32 = np.empty(yshape, F32)
    # C[n, g] = W cols (OCg x OH*OW) or its transpose cols^T W^T: the same chains (a product's two
    # factors commute), so the orientation is chosen for speed only: the long side along N (the
    # micro-kernel's 32 / 16 / 8 columns), e.g. depthwise (OCg = 1) always as W cols
    w_left = ocg < 32 if nhwc else (ohw >= 32 or ohw >= ocg)
    cv = y32.reshape(n, ohw, g, ocg).transpose(0, 2, 3, 1) if nhwc else y32.reshape(n, g, ocg, ohw)
    if w_left:
        used = gemm(wg, colg, cv, bd)
    else:
        used = gemm(colg.swapaxes(-1, -2), wg.swapaxes(-1, -2), cv.swapaxes(-1, -2), bd)
    if nhwc:
        y = epilogue(y32.reshape(1, n * ohw, oc), bias, 1, activation, out_dt, bd)
    else:
        y = epilogue(y32.reshape(n, oc, ohw), bias, 0, activation, out_dt, bd)
    y = y.reshape(yshape)
    _emit("conv2d", f"{_TAG[x4.dtype] if x4.dtype in _TAG else 'f32'}:{_TAG.get(w.dtype, 'f32')}:{_TAG[out_dt]}",
          bd, f"{dc._shapes_text(x4, w)},g{g},{'nhwc' if nhwc else 'nchw'},im2col(c;kh;kw)", used, t0)
    return dc._unshape(y, nd, nhwc, unbatched)
