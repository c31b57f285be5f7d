"""``onepath.conv2d`` / ``onepath.conv1d``: torch.nn.functional.conv2d/conv1d semantics on numpy arrays.

float32 and bfloat16 run the dispatched C kernels (float32 accumulation); float64 runs an exact
float64 reference (im2col + einsum). The algorithm is picked per problem (``select_conv``):

* ``depthwise``      groups == C (> 1), any channel multiplier: direct vectorised kernel;
* ``1x1_gemm``       1x1 kernels: a GEMM on the input in place (stride 1, unpadded float32) or on
                     strided/padded views gathered while packing;
* ``grouped``        other grouped convolutions: one implicit GEMM per (image, group);
* ``implicit_gemm``  everything else: GEMM micro-kernels over input patches gathered block by block.

Every algorithm has a registry row per ISA level (``onepath.dispatch.registry._CONV``).
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
import time
from functools import lru_cache

import numpy as np

from .. import _stats, _threads, _verbose
from .._aligned import empty_aligned
from ..dispatch import cap as _cap
from ..dispatch import registry
from ..dispatch.levels import level_index
from ..dispatch.registry import algorithm_for
from ..kernels import load
from .._repro_mode import on as _repro_on
from ._gemm import act_code, activation_name
from .linear import kernel_activation

try:  # ml_dtypes is a declared dependency; keep import errors readable
    from ml_dtypes import bfloat16 as _BF16_TYPE
    _BF16 = np.dtype(_BF16_TYPE)
except ImportError:  # pragma: no cover
    _BF16 = None

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_SUPPORTED = "float32, bfloat16, float64"

__all__ = ["conv2d", "conv1d", "select_conv", "conv_output_shape", "reference_conv2d"]


# ------------------------------------------------------------------------------------------------
# argument handling


def _int(v, what):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{what} must be an int or a tuple of ints, got {v!r}")
    return int(v)


def _pair(v, nd, what):
    """int or sequence of nd ints -> tuple of nd ints."""
    if isinstance(v, (tuple, list)):
        if len(v) == 1 and nd == 2:
            v = (v[0], v[0])
        if len(v) != nd:
            raise ValueError(f"expected {what} to be a single integer value or a list of {nd} values "
                             f"to match the convolution dimensions, but got {what}={list(v)}")
        return tuple(_int(x, what) for x in v)
    x = _int(v, what)
    return (x,) * nd


def _padding(padding, nd, k, dil, stride):
    """-> tuple of nd (before, after) pairs."""
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return ((0, 0),) * nd
        if mode == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions "
                                 f"(stride={list(stride)})")
            out = []
            for kk, dd in zip(k, dil):
                total = dd * (kk - 1)
                out.append((total // 2, total - total // 2))  # PyTorch: the extra row/column after
            return tuple(out)
        raise ValueError(f"Invalid padding string: {padding!r} (valid: 'valid', 'same', an int, "
                         "a tuple of ints, or ((top, bottom), (left, right)))")
    if isinstance(padding, (tuple, list)) and any(isinstance(p, (tuple, list)) for p in padding):
        if len(padding) != nd or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in padding):
            raise ValueError(f"asymmetric padding must be {nd} (before, after) pairs, got {padding!r}")
        out = tuple((_int(a, "padding"), _int(b, "padding")) for a, b in padding)
    else:
        out = tuple((p, p) for p in _pair(padding, nd, "padding"))
    if any(p < 0 for pair in out for p in pair):
        raise ValueError(f"negative padding is not supported (padding={padding!r})")
    return out


_ALIGNED_MIN = 1 << 20


def _empty_out(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``; from 1 MiB on ``empty_aligned`` (64-byte boundary, a view):
    numpy's blocks that glibc maps with mmap (large ones) start 16 bytes into a page, and a kernel
    that streams whole cache lines (conv_stem.c's non-temporal stores) needs them on a line."""
    if math.prod(shape) * np.dtype(dtype).itemsize < _ALIGNED_MIN:
        return np.empty(shape, dtype)
    return empty_aligned(shape, dtype)


def _shape(a) -> str:
    return "[" + ", ".join(map(str, a)) + "]"


def conv_output_shape(size, k, stride, pad, dil):
    """Output extent of one spatial axis: floor((size + before + after - dil (k - 1) - 1) / stride) + 1."""
    return (size + pad[0] + pad[1] - dil * (k - 1) - 1) // stride + 1


def _result_dtype(x: np.ndarray, w: np.ndarray, b, dtype):
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt not in (_F32, _F64) and dt != _BF16:
            raise TypeError(f"conv: unsupported dtype {dt}; supported: {_SUPPORTED}")
    for name, a in (("input", x), ("weight", w), ("bias", b)):
        if a is not None and a.dtype not in (_F32, _F64) and a.dtype != _BF16:
            raise TypeError(f"conv: unsupported {name} dtype {a.dtype}; supported: {_SUPPORTED}")
    if dtype is not None:
        return np.dtype(dtype)
    dts = [x.dtype, w.dtype]  # the bias does not promote (it is added in float32 accumulation)
    if _F64 in dts:
        return _F64
    if all(d == _BF16 for d in dts):
        return _BF16
    return _F32


# ------------------------------------------------------------------------------------------------
# registry selection


_BF16_SYMBOL = "op_conv2d_bf16"


def select_conv(algorithm: str, dtype: str = "float32", level: str | None = None,
                bf16_weight: bool = True) -> registry.Kernel:
    """The registry row that runs ``algorithm`` ("implicit_gemm", "1x1_gemm", "grouped",
    "depthwise") on ``dtype`` inputs at the ISA level in force (or ``level``), blocking filled in.
    ``bf16_weight=False`` (bfloat16 input with a float32 weight) skips the native BF16 rows."""
    from ..dispatch import cap
    if level is None:
        level = cap.isa()
    return _select_conv(algorithm, str(dtype), level, bool(bf16_weight))


@lru_cache(maxsize=None)
def _select_conv(algorithm, dtype, level, bf16_weight=True):
    cap_i = level_index(level)
    for row in registry.rows("conv2d", dtype):
        if row.symbol == _BF16_SYMBOL and not bf16_weight:
            continue
        if row.algorithm == algorithm and level_index(row.level) <= cap_i:
            # a tuning file's kernel_level choice; blocking: tuning file, shipped TUNING row or cache model
            return registry.with_blocking(registry.tuned_kernel(row))
    raise ValueError(f"no conv2d kernel for algorithm={algorithm!r} dtype={dtype!r} at level {level!r}")


# ------------------------------------------------------------------------------------------------
# float64 reference


def _act_np(y: np.ndarray, activation):
    if activation is None:
        return y
    if activation == "relu":
        return np.where(y < 0, 0.0, y)  # NaN stays NaN
    if activation == "silu":
        with np.errstate(over="ignore"):
            return y / (1.0 + np.exp(-y))
    if activation == "gelu":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * y * (1.0 + erf(y / math.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))
    act_code(activation)  # raises ValueError for unknown names
    return y


def reference_conv2d(x, w, bias=None, stride=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1),
                     groups=1, activation=None):
    """Exact float64 conv2d on NCHW x (N, C, H, W), w (OC, C/groups, KH, KW): im2col + einsum."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    oh = conv_output_shape(h, kh, stride[0], pads[0], dilation[0])
    ow = conv_output_shape(wd, kw, stride[1], pads[1], dilation[1])
    y = np.zeros((n, oc, max(oh, 0), max(ow, 0)), np.float64)
    if y.size and cg:
        xp = np.zeros((n, c, h + pads[0][0] + pads[0][1], wd + pads[1][0] + pads[1][1]))
        xp[:, :, pads[0][0]:pads[0][0] + h, pads[1][0]:pads[1][0] + wd] = x
        s = xp.strides
        win = np.lib.stride_tricks.as_strided(
            xp, (n, c, oh, ow, kh, kw),
            (s[0], s[1], s[2] * stride[0], s[3] * stride[1], s[2] * dilation[0], s[3] * dilation[1]),
            writeable=False)
        ocg = oc // groups
        win = win.reshape(n, groups, cg, oh, ow, kh, kw)
        wg = w.reshape(groups, ocg, cg, kh, kw)
        y = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, oc, oh, ow)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return _act_np(y, activation)


# ------------------------------------------------------------------------------------------------
# the public functions


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, layout="NCHW",
           activation=None, dtype=None):
    """2-D convolution with torch.nn.functional.conv2d semantics on numpy arrays.

    Args:
        input: (N, C, H, W) or unbatched (C, H, W); with ``layout="NHWC"`` (N, H, W, C) or (H, W, C).
        weight: (OC, C/groups, KH, KW) in every layout (any strides).
        bias: None or (OC,).
        stride, dilation: int or (h, w) pair, >= 1 (dilation counts from 1 as in PyTorch).
        padding: int, (h, w), ``"valid"``, ``"same"`` (stride 1; an odd total puts the extra row /
            column at the bottom / right as PyTorch does) or asymmetric ((top, bottom), (left, right)).
        groups: divides C and OC.
        layout: "NCHW" or "NHWC" (input and output; NHWC returns (N, OH, OW, OC)). String options
            (layout, padding, activation) are matched case-insensitively.
        activation: None, "relu", "gelu", "gelu_tanh" or "silu", fused after the bias.
        dtype: compute/result dtype (float32, bfloat16 or float64); default: float64 if an operand is
            float64, bfloat16 if input and weight are both bfloat16, else float32.
    Returns:
        ndarray of the result dtype. float64 (not accelerated) returns exactly
        ``reference_conv2d(x, w, bias, stride, pads, dilation, groups, activation)`` of this module
        on the NCHW float64 view of the input (NHWC: transposed back, C-contiguous): the operands
        converted to float64, ``np.einsum("ngchwij,gocij->ngohw", windows, w, optimize=True)``
        over the zero-padded input's windows, ``+ bias.reshape(1, -1, 1, 1)``, then relu as
        ``np.where(y < 0, 0.0, y)``, silu ``y / (1 + np.exp(-y))``, gelu with ``math.erf``,
        gelu_tanh with ``np.tanh``. Other dtypes (float16, complex, integers, bool, object) raise
        TypeError. An accelerated result of 1 MiB or more starts on a 64-byte boundary, a view
        into a buffer 64 bytes longer (``y.base``; ``y.resize`` raises as for any view).
    Raises:
        ValueError: wrong ranks, channel/group mismatches, kernel larger than the padded input,
            stride/dilation < 1, negative padding, "same" with stride > 1, a padded input of 2**60
            elements or more (shapes in the message).
        TypeError: unsupported dtypes (the message names the supported ones).
    """
    if _repro_on():  # onepath.reproducible(): ops/_repro.py
        from ._repro import conv as _rc
        return _rc(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, 2)
    return _conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, 2)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, layout="NCL",
           activation=None, dtype=None):
    """1-D convolution with torch.nn.functional.conv1d semantics: input (N, C, L) or (C, L)
    (``layout="NLC"`` or ``"NWC"``: (N, L, C); ``"NCL"`` / ``"NCW"`` the default, any letter case),
    weight (OC, C/groups, K); padding an int, (p,), "valid", "same" or ((left, right),). Other
    arguments and the errors raised as ``conv2d``."""
    if _repro_on():  # onepath.reproducible(): ops/_repro.py
        from ._repro import conv as _rc
        return _rc(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, 1)
    return _conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, 1)


# layout names (matched case-insensitively) -> channels last
_LAYOUTS = {1: {"NCL": False, "NCW": False, "NLC": True, "NWC": True},
            2: {"NCHW": False, "NHWC": True}}


# Plans of problems already run (see ``_plan_key``), so a repeated call skips argument parsing,
# checks, selection and descriptor set-up. Bounded: cleared when full.
_PLANS: dict = {}
_PLANS_MAX = 512
# The batch whose rules choose an NCHW convolution's formulation (registry.conv_nchw_as_nhwc: a row
# may send a plane through the NHWC formulation from a batch of 2 only, and the two formulations sum
# in different orders) and its depthwise kernel (registry.dw_row_flags: zen4's wide stride-1 row
# kernels at batch 1 only). None: the call's own batch. onepath.dask sets it to the whole array's
# batch around each chunk (route_batch), so that a chunk of images takes the in-memory call's route
# and gives its bits.
_ROUTE_BATCH: contextvars.ContextVar = contextvars.ContextVar("onepath_conv_route_batch",
                                                             default=None)


@contextlib.contextmanager
def route_batch(n: int):
    """Within the block, NCHW convolutions choose between the NCHW and the NHWC formulation, and a
    depthwise one its kernel, as for a batch of ``n`` images (int >= 1) whatever their own batch:
    ``onepath.dask.conv2d`` runs each chunk of a batch so, which gives every image the bits of the
    call on the whole batch. The results are the same convolution either way. Per thread (a
    ``contextvars`` variable). Raises ValueError for ``n`` not an int >= 1."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"route_batch: n must be an int >= 1, got {n!r}")
    tok = _ROUTE_BATCH.set(int(n))
    try:
        yield
    finally:
        _ROUTE_BATCH.reset(tok)


registry.on_clear(_select_conv.cache_clear)
registry.on_clear(_PLANS.clear)  # plans hold a blocking: dropped when the tuning in force changes


def _plain(v) -> bool:
    """An int, a str, None, or a tuple (of tuples) of exact ints: values whose equality implies
    identical parsing (bool, numpy scalars and lists take the checked path)."""
    t = type(v)
    if t is int or t is str or v is None:
        return True
    if t is tuple:
        for e in v:
            te = type(e)
            if te is not int and not (te is tuple and all(type(i) is int for i in e)):
                return False
        return True
    return False


def _plan_key(x, w, b, stride, padding, dilation, groups, layout, activation, dtype, nd):
    """Cache key of a call (None when an argument is not a plain value)."""
    if (type(x) is not np.ndarray or type(w) is not np.ndarray
            or (b is not None and type(b) is not np.ndarray)):
        return None
    if not (_plain(stride) and _plain(padding) and _plain(dilation) and type(groups) is int
            and (activation is None or type(activation) is str) and type(layout) is str):
        return None
    if dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            return None
    if not (x.dtype.isnative and w.dtype.isnative and (b is None or b.dtype.isnative)):
        return None  # byte-swapped operands are converted on the full path (_native)
    return (nd, x.shape, x.dtype, w.shape, w.dtype, None if b is None else (b.shape, b.dtype),
            stride, padding, dilation, groups, layout, activation, dtype, _cap.isa(),
            _ROUTE_BATCH.get())


def _native(a):
    """``a`` with its values in the machine's byte order (a '>f4' array on x86 becomes float32)."""
    return a if a is None or a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


# Padded input elements (N * C * padded H * padded W) from which conv2d raises ValueError: the
# kernels index the padded planes with 64-bit integers (2**60 floats would be 4 EiB anyway)
_PADDED_MAX = 1 << 60


def _conv(input, weight, bias, stride, padding, dilation, groups, layout, activation, dtype, nd):
    key = _plan_key(input, weight, bias, stride, padding, dilation, groups, layout, activation,
                    dtype, nd)
    if key is not None:
        plan = _PLANS.get(key)
        if plan is not None:
            x, w = input, weight
            if x.ndim != 4:
                x = x.reshape(plan.x4shape)
            if w.ndim != 4:
                w = w[:, :, np.newaxis, :]
            y = _run_plan(plan, x, w, bias)
            if nd == 1 or input.ndim == 3:
                y = _unshape(y, nd, plan.nhwc, input.ndim == nd + 1)
            return y
    name = f"conv{nd}d"
    if not isinstance(layout, str) or layout.upper() not in _LAYOUTS[nd]:
        raise ValueError(f"{name}: unknown layout {layout!r}; valid: {', '.join(_LAYOUTS[nd])}")
    nhwc = _LAYOUTS[nd][layout.upper()]
    x = _native(np.asarray(input))
    w = _native(np.asarray(weight))
    b = None if bias is None else _native(np.asarray(bias))
    if dtype is not None:
        dtype = np.dtype(dtype).newbyteorder("=")
    out_dt = _result_dtype(x, w, b, dtype)
    activation = activation_name(activation)
    code = act_code(activation)

    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, "
                         f"but got input of size: {_shape(x.shape)}")
    if w.ndim != nd + 2:
        raise ValueError(f"{name}: expected {nd + 2}D weight (OC, C/groups, " +
                         ("KH, KW" if nd == 2 else "K") + f"), but got weight of size: {_shape(w.shape)}")
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[np.newaxis]
    # to the 2-D problem: conv1d is a conv2d with H = KH = 1
    if nd == 1:
        x = x[:, np.newaxis] if nhwc else x[:, :, np.newaxis]  # (N, 1, L, C) or (N, C, 1, L)
        w = w[:, :, np.newaxis, :]
    if nhwc:
        x_nchw_shape = (x.shape[0], x.shape[3], x.shape[1], x.shape[2])
    else:
        x_nchw_shape = x.shape
    n, c, h, wd = x_nchw_shape
    oc, cg, kh, kw = w.shape

    if kh < 1 or kw < 1:
        sizes = f"kernel_height: {kh} kernel_width: {kw}" if nd == 2 else f"kernel_width: {kw}"
        raise ValueError(f"kernel size should be greater than zero, but got {sizes} (weight of size "
                         f"{_shape(weight_shape(w, nd))})")
    groups = _int(groups, "groups")
    if groups < 1:
        raise ValueError(f"non-positive groups is not supported (groups={groups})")
    st = _pair(stride, nd, "stride")
    dl = _pair(dilation, nd, "dilation")
    if any(s < 1 for s in st):
        raise ValueError(f"non-positive stride is not supported (stride={list(st)})")
    if any(d < 1 for d in dl):
        raise ValueError(f"dilation should be greater than zero, but got {list(dl)}")
    pads = _padding(padding, nd, w.shape[2:] if nd == 2 else (kw,), dl, st)
    if nd == 1:
        st, dl, pads = (1,) + st, (1,) + dl, ((0, 0),) + pads
    if oc < 1:
        raise ValueError(f"expected weight to be at least 1 at dimension 0, but got weight of size "
                         f"{_shape(weight_shape(w, nd))} instead")
    if oc % groups:
        raise ValueError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                         f"dimension 0, but got weight of size {_shape(weight_shape(w, nd))} instead")
    if cg * groups != c:
        xs = _shape(np.shape(input) if not unbatched else (1,) + np.shape(input))
        hint = ""
        if nhwc:  # the usual cause: channels-first data passed with a channels-last layout
            hint = (f" (layout={layout!r} reads the input as " + ("(N, H, W, C)" if nd == 2 else "(N, L, C)")
                    + f": its last axis, {c}, is taken as the channels; for channels-first data use "
                    + ("layout='NCHW'" if nd == 2 else "layout='NCL'") + ")")
        raise ValueError(f"Given groups={groups}, weight of size {_shape(weight_shape(w, nd))}, "
                         f"expected input{xs} to have {cg * groups} channels, but got {c} channels "
                         f"instead{hint}")
    if b is not None and (b.ndim != 1 or b.shape[0] != oc):
        raise ValueError(f"Given weight of size {_shape(weight_shape(w, nd))}, expected bias to be "
                         f"1-dimensional with {oc} elements, but got bias of size {_shape(b.shape)} instead")
    ph = h + pads[0][0] + pads[0][1]
    pw = wd + pads[1][0] + pads[1][1]
    ekh, ekw = dl[0] * (kh - 1) + 1, dl[1] * (kw - 1) + 1
    if ph < ekh or pw < ekw:
        if nd == 2:
            raise ValueError(f"Calculated padded input size per channel: ({ph} x {pw}). Kernel size: "
                             f"({ekh} x {ekw}). Kernel size can't be greater than actual input size")
        raise ValueError(f"Calculated padded input size per channel: ({pw}). Kernel size: ({ekw}). "
                         "Kernel size can't be greater than actual input size")
    if max(n, 1) * max(c, 1) * ph * pw >= _PADDED_MAX:
        raise ValueError(f"padded input of {max(n, 1)} x {max(c, 1)} x {ph} x {pw} elements "
                         f"(padding {[list(p) for p in pads]}) is past the kernels' 64-bit index "
                         f"arithmetic (at most {_PADDED_MAX - 1} elements)")
    oh = (ph - ekh) // st[0] + 1
    ow = (pw - ekw) // st[1] + 1
    # a stride past the (padded) input moves to no second output row or column: 1 there, so that no
    # kernel sizes a buffer by it (a depthwise stride of 2**62 overflowed one, found by a review)
    st = (st[0] if oh > 1 else 1, st[1] if ow > 1 else 1)

    if out_dt == _F64:
        xr = x if not nhwc else x.transpose(0, 3, 1, 2)
        t0 = time.perf_counter()
        y = reference_conv2d(xr, w, b, st, pads, dl, groups, activation)
        _stats.record("conv2d", "float64", "reference")
        if _verbose.enabled():
            _verbose.emit("conv2d", "f64:f64:f64", "reference", "conv_reference_f64(im2col_einsum)",
                          _shapes_text(x, w), 1, time.perf_counter() - t0)
        if nhwc:
            y = np.ascontiguousarray(y.transpose(0, 2, 3, 1))
    else:
        yshape = (n, oh, ow, oc) if nhwc else (n, oc, oh, ow)
        empty_out, no_sum = n == 0 or oh == 0 or ow == 0, c == 0 or h == 0 or wd == 0
        dts = shapes = ""  # the verbose line of a call no kernel runs
        if (empty_out or no_sum) and _verbose.enabled():
            dts = (("bf16" if x.dtype == _BF16 else "f32") + ":f32:"
                   + ("bf16" if out_dt == _BF16 else "f32"))
            shapes = _shapes_text(x, w) + (",nhwc" if nhwc else "")
        if empty_out:
            y = np.empty(yshape, out_dt)
            if dts:
                _verbose.emit("conv2d", dts, "none", "empty_output", shapes, 0, 0.0)
        elif no_sum:  # nothing to reduce over: the output is the bias (activated)
            y = _fill_bias(np.empty(yshape, _F32), b, nhwc, activation, out_dt, dts, shapes)
        else:
            plan = _make_plan(x, w, n, c, h, wd, oc, kh, kw, oh, ow, st, pads, dl, groups, nhwc,
                              code, out_dt, activation)
            y = _run_plan(plan, x, w, b)
            if key is not None:
                if len(_PLANS) >= _PLANS_MAX:
                    _PLANS.clear()
                _PLANS[key] = plan
    return _unshape(y, nd, nhwc, unbatched)


def _unshape(y, nd, nhwc, unbatched):
    """The 4-D result back to the caller's rank / layout."""
    if nd == 1:
        y = y[:, :, 0, :] if not nhwc else y[:, 0, :, :]
    if unbatched:
        y = y[0]
    return y


def weight_shape(w, nd):
    return w.shape if nd == 2 else (w.shape[0], w.shape[1], w.shape[3])


def _shapes_text(x, w) -> str:
    """A verbose line's problem for the calls with no kernel descriptor: "1x3x8x8*4x3x3x3" (no
    commas: the line is comma-separated)."""
    return "x".join(map(str, x.shape)) + "*" + "x".join(map(str, w.shape))


def _fill_bias(y, b, nhwc, activation, out_dt, dts, shapes):
    """Output of an empty reduction (C, H or W == 0): the bias, activated as the kernels' write-out
    activates it (``linear.kernel_activation``: the bits a sum of zeros plus that bias gets);
    ``dts`` and ``shapes``: the call's dtypes and problem for its ONEPATH_VERBOSE line."""
    val = kernel_activation(np.zeros(1, _F32) if b is None else np.asarray(b, _F32).reshape(-1),
                            activation, "conv2d", dts, shapes)
    shape = (1, 1, 1, -1) if nhwc else (1, -1, 1, 1)
    y[...] = val.reshape(shape) if val.size > 1 else val[0]
    return y.astype(out_dt) if out_dt != _F32 else y


class _Plan:
    """Everything about a kernel call that depends only on the problem (shapes, dtypes, geometry,
    options, ISA level): built once by the checked path, reused by ``_conv``'s fast path."""
    __slots__ = ("x4shape", "xmode", "wmode", "native", "algo", "nhwc", "code", "out_dt", "yshape",
                 "ysize", "row", "dtype_name", "lib", "ffi", "desc", "blk", "fn", "wtype", "nd",
                 "unbatched", "activation", "x_bf16", "dts", "text", "dw_wbits", "dw_ybf16")


def _make_plan(x, w, n, c, h, wd, oc, kh, kw, oh, ow, st, pads, dl, groups, nhwc, code, out_dt,
               activation):
    """The per-problem part of a kernel call (x is the 4-D input, w the 4-D weight)."""
    pl = _Plan()
    pl.x4shape = x.shape
    pl.nhwc = nhwc
    pl.code = code
    pl.out_dt = out_dt
    pl.activation = activation
    pl.yshape = (n, oh, ow, oc) if nhwc else (n, oc, oh, ow)
    pl.ysize = n * oh * ow * oc
    # operands: input f32 or bf16 bits (widened in the kernels), weight/bias f32
    if x.dtype == _BF16:
        pl.xmode, x_bf16 = 1, 1          # bfloat16 bits in place
    elif out_dt == _BF16:
        pl.xmode, x_bf16 = 2, 1          # bfloat16 compute on float32 input: round the input once
    else:
        pl.xmode, x_bf16 = 0, 0          # float32
    pl.x_bf16 = x_bf16
    algo = algorithm_for(c, oc, kh, kw, groups)
    pl.algo = algo
    pl.dtype_name = "bfloat16" if x_bf16 else "float32"
    # the weight is bfloat16 (or rounded to it) exactly when the compute dtype is bfloat16
    bf16_weight = bool(x_bf16) and (out_dt == _BF16 or w.dtype == _BF16)
    row = select_conv(algo, pl.dtype_name, bf16_weight=bf16_weight)
    pl.row = row
    native = row.symbol == _BF16_SYMBOL
    pl.native = native
    if native:
        pl.wmode = 0 if w.dtype == _BF16 else 1          # bits in place / rounded from float32
    else:
        pl.wmode = 2 if (out_dt == _BF16 and w.dtype != _BF16) else 3   # rounded to bf16 / as f32
    mod = load(row.level)
    ffi, lib = mod.ffi, mod.lib
    pl.ffi, pl.lib = ffi, lib
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w = n, c, h, wd
    d.oc, d.oh, d.ow = oc, oh, ow
    d.kh, d.kw = kh, kw
    d.sh, d.sw = st
    d.pt, d.pl = pads[0][0], pads[1][0]
    d.dh, d.dw = dl
    d.groups = groups
    route_n = _ROUTE_BATCH.get() or n   # onepath.dask: the whole batch's route (route_batch)
    as_nhwc = registry.conv_nchw_as_nhwc(row, route_n, oh * ow, st != (1, 1))
    d.nhwc = 1 if nhwc else (2 if as_nhwc else 0)
    # NCHW 1x1 float32 over all images' pixels (zen4 CONV_F32_OPTIONS "nchw1x1_joint"): the kernel
    # decides (op_conv2d_f32_joint); it replaces the NHWC formulation, so the plan says "joint"
    joint = (not nhwc and not native and algo == "1x1_gemm" and not x_bf16
             and bool(lib.op_conv2d_f32_joint(d, 0)))
    route = ",joint" if joint else ""
    if joint:
        d.nhwc = 0
    elif route_n != n and d.nhwc == 2 and algo == "1x1_gemm" and not native and not x_bf16:
        # a chunk of a batch (route_batch) whose whole batch runs the joint GEMM, which sums as the
        # NCHW GEMM does: the chunk runs the NCHW GEMM
        whole = ffi.new("op_conv_desc *", {**_desc_fields(d), "n": route_n})
        if lib.op_conv2d_f32_joint(whole, 0):
            d.nhwc = 0
    # NCHW 1x1 float32 with the weight read in place (zen4 CONV_F32_OPTIONS "nchw1x1_a_in_place"), or
    # with 49 output pixels in their own kernel ("nchw1x1_n49"): the kernel decides
    # (op_conv2d_f32_a_in_place, op_conv2d_f32_n49); it replaces the NHWC formulation
    elif (not nhwc and not native and algo == "1x1_gemm" and not x_bf16
          and lib.op_conv2d_f32_a_in_place(d, 0)):
        d.nhwc = 0
        route = ",n49" if lib.op_conv2d_f32_n49(d, 0) else ",w_in_place"
    if algo == "depthwise" and not nhwc:
        # (batch-dependent rows, zen4's wide float32 stride-1 ones: the whole batch's, as above)
        d.dw_rows = registry.dw_row_flags(row, st, wd, bool(x_bf16), n=route_n)
    pl.desc = d
    pl.blk = ffi.new("op_blocking *", {"mc": row.mc, "kc": row.kc, "nc": row.nc})
    pl.wtype = "uint16_t[]" if native else "float[]"
    if native:
        pl.fn = lib.op_conv2d_bf16
    elif algo == "depthwise":
        pl.fn = lib.op_conv2d_dw_f32
    else:
        pl.fn = lib.op_conv2d_f32
    # depthwise: bfloat16 weights go in as bits (widened by the kernel), and the kernel rounds a
    # bfloat16 output itself in its write-out (as the native bfloat16 kernel does); the float32
    # kernel at levels without BF16 instructions writes float32, rounded by op_conv_f32_to_bf16
    pl.dw_wbits = algo == "depthwise" and w.dtype == _BF16
    pl.dw_ybf16 = algo == "depthwise" and out_dt == _BF16
    pl.dts = ("bf16" if x_bf16 else "f32") + ":f32:" + ("bf16" if out_dt == _BF16 else "f32")
    # routes the kernel takes first: few input channels on the direct kernel (kernels/conv_stem.c,
    # which reads and writes NCHW itself: no "as_nhwc" even where the limits say so) or on AMX
    # tiles; an NHWC k x k one on AMX tiles reading the input per tap
    stem = algo != "depthwise" and bool(lib.op_conv2d_stem(d, int(native)))
    pl.text = describe(d) + (",nhwc" if nhwc else ",as_nhwc" if d.nhwc == 2 and not stem else route)
    if stem:
        pl.text += ",stem"
    elif native and lib.op_conv2d_bf16_amx_s1(d):
        pl.text += ",amx_s1"
    elif native and lib.op_conv2d_bf16_amx_stem(d):
        pl.text += ",amx_stem"
    return pl


def _input_operand(pl, x):
    """The input as the kernel reads it: float32, or bfloat16 bits (as given, or rounded once)."""
    if pl.xmode == 0:
        return np.ascontiguousarray(x, _F32)
    if pl.xmode == 1:
        return np.ascontiguousarray(x).view(np.uint16)
    return np.ascontiguousarray(x, _F32).astype(_BF16).view(np.uint16)


def _run_dw(pl, x, w, b):
    """``_run_plan`` for depthwise plans (the per-call work kept to a minimum: small layers run in
    tens of microseconds). C-contiguous operands in the kernel's dtype (float32, or bfloat16 read as
    its bits) go to the kernel as they are: an NCHW weight (OC, 1, KH, KW) is already (OC, KH, KW)."""
    xd = x.dtype
    if x.flags.c_contiguous and (xd is _F32 if pl.xmode == 0 else pl.xmode == 1 and xd == _BF16):
        xk = x
    else:
        xk = _input_operand(pl, x)
    wd = w.dtype
    if not pl.nhwc and w.flags.c_contiguous and (
            (pl.dw_wbits and wd == _BF16) or (wd is _F32 and pl.wmode != 2)):
        wk = w
    else:
        # weight (OC, 1, KH, KW) -> NCHW (OC, KH, KW); NHWC (KH, KW, OC)
        if pl.dw_wbits:
            wk = w.view(np.uint16)[:, 0]
        else:
            wk = np.asarray(w, _F32)[:, 0]
            if pl.wmode == 2:
                wk = wk.astype(_BF16).astype(_F32)
        if pl.nhwc:
            wk = wk.transpose(1, 2, 0)
        wk = np.ascontiguousarray(wk)
    ffi = pl.ffi
    ybf16 = pl.dw_ybf16
    y = _empty_out(pl.yshape, np.uint16 if ybf16 else _F32)
    verbose = _verbose.enabled()
    t0 = time.perf_counter() if verbose else 0.0
    used = pl.fn(pl.desc, ffi.from_buffer(xk), pl.x_bf16, ffi.from_buffer(wk), pl.dw_wbits,
                 ffi.NULL if b is None else ffi.from_buffer("float[]", np.ascontiguousarray(b, _F32)),
                 ffi.from_buffer(y), ybf16, pl.code, _threads.get_num_threads())
    _stats.record("conv2d", pl.dtype_name, pl.row.level)
    if used < 0:
        if used == -3:  # (the plan always pairs a bfloat16 output with bfloat16 input)
            raise RuntimeError(f"{pl.row.name}: bfloat16 output requested from float32 input")
        raise MemoryError(f"{pl.row.name}: could not allocate scratch for conv {describe(pl.desc)}")
    if ybf16:
        y = y.view(_BF16)
    if verbose:
        _verbose.emit("conv2d", pl.dts, pl.row.level, f"{pl.row.name}({pl.algo})", pl.text, used,
                      time.perf_counter() - t0)
    return y


def _run_plan(pl, x, w, b):
    """One kernel call of a plan on 4-D x / w (shapes and dtypes as when the plan was made)."""
    if pl.algo == "depthwise":
        return _run_dw(pl, x, w, b)
    xk = _input_operand(pl, x)
    wm = pl.wmode
    if wm == 0:
        wk = np.ascontiguousarray(w).view(np.uint16)
    elif wm == 1:
        wk = np.ascontiguousarray(np.asarray(w, _F32).astype(_BF16)).view(np.uint16)
    else:
        w32 = np.asarray(w, _F32)
        if wm == 2:
            w32 = w32.astype(_BF16).astype(_F32)
        wk = np.ascontiguousarray(w32)
    ffi = pl.ffi
    # the native bfloat16 kernel rounds its float32 result to a bfloat16 output itself
    y_bf16 = pl.native and pl.out_dt == _BF16
    y = _empty_out(pl.yshape, np.uint16 if y_bf16 else _F32)
    nthreads = _threads.get_num_threads()
    verbose = _verbose.enabled()
    t0 = time.perf_counter() if verbose else 0.0
    xp = ffi.from_buffer(xk)
    wp = ffi.from_buffer(pl.wtype, wk)
    bp = ffi.NULL if b is None else ffi.from_buffer("float[]", np.ascontiguousarray(b, _F32))
    yp = ffi.from_buffer("uint16_t[]" if y_bf16 else "float[]", y)
    if pl.native:
        used = pl.fn(pl.desc, ffi.from_buffer("uint16_t[]", xk), wp, bp, yp, int(y_bf16), pl.code,
                     pl.blk, nthreads)
    else:
        used = pl.fn(pl.desc, xp, pl.x_bf16, wp, bp, yp, pl.code, pl.blk, nthreads)
    _stats.record("conv2d", pl.dtype_name, pl.row.level)
    if used < 0:
        if used == -2:
            raise RuntimeError(f"{pl.row.name}: the AMX tile kernel faulted on conv {describe(pl.desc)}")
        raise MemoryError(f"{pl.row.name}: could not allocate scratch for conv {describe(pl.desc)}")
    if y_bf16:
        y = y.view(_BF16)
    elif pl.out_dt == _BF16:
        yb = _empty_out(pl.yshape, np.uint16)
        pl.lib.op_conv_f32_to_bf16(yp, ffi.from_buffer("uint16_t[]", yb), pl.ysize, nthreads)
        y = yb.view(_BF16)
    if verbose:
        _verbose.emit("conv2d", pl.dts, pl.row.level, f"{pl.row.name}({pl.algo})", pl.text, used,
                      time.perf_counter() - t0)
    return y


def _desc_fields(d) -> dict:
    """The fields of an ``op_conv_desc`` as a dict (a copy to change one of them in)."""
    return {f: getattr(d, f) for f in dir(d)}


def describe(d) -> str:
    """benchdnn-style descriptor of an op_conv_desc (dilation printed benchdnn-style, from 0)."""
    s = f"g{d.groups}mb{d.n}ic{d.c}ih{d.h}iw{d.w}oc{d.oc}oh{d.oh}ow{d.ow}kh{d.kh}kw{d.kw}"
    s += f"sh{d.sh}sw{d.sw}ph{d.pt}pw{d.pl}dh{d.dh - 1}dw{d.dw - 1}"
    return s
