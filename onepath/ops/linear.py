"""``onepath.linear``: torch.nn.Linear's product with fused bias and activation, on a weight array or
a ``PackedWeight`` (ops/packed.py)."""
from __future__ import annotations

import math
import time

import numpy as np

from .. import _verbose
from ..dispatch import registry
from ..dispatch import cap as _cap
from ..dispatch.cap import isa
from ..dtypes import BF16, F32, result_dtype, to_bfloat16, to_float32
from . import _small
from ._bf16 import _TAG, run_gemm_bf16, run_gemm_packed
from .._repro_mode import on as _repro_on
from ._gemm import act_code, activation_name, kernel_ready, run_gemm
from .packed import PackedWeight, prepack  # noqa: F401  (prepack: also importable from here, its old home)

_ACTS = (None, "relu", "gelu", "gelu_tanh", "silu")
# Bias dtypes the kernels' float32 write-out holds exactly (a float32 result stays float32 in numpy
# too); any other bias dtype takes numpy's expression, whose promotion it joins.
_KERNEL_BIAS = (F32, BF16, np.dtype(np.float16))
_ACT_CODE = {a: act_code(a) for a in _ACTS}  # exact names only (the fast path); others are checked
_ND = np.ndarray
_fast_linear = _small.fast_linear  # the scoped cap -> kernels/pyfast.inc's linear (filled on use)
_scoped_get = _cap._scoped.get
_off_get = _small._off.get


# A bfloat16 PackedWeight at these levels is float32 panels (twice the bytes of the weight: see
# "prepacked B" in kernels/gemm_bf16.c), so decode (up to _RAW_DECODE_M rows) reads the raw
# bfloat16 weight the PackedWeight keeps, through the small-M loops of a raw weight (the same
# kernel and bits as linear on that weight). AMD EPYC Zen 3 VM, avx2, 1 x 4096 x 4096, 2 threads,
# 2026-12-06: the float32 panels streamed 15.8 GB/s of bfloat16 weight, the raw loops 25-29.
_RAW_DECODE_LEVELS = ("avx2",)
_RAW_DECODE_M = 4


# ------------------------------------------------------------------------------------------------
# numpy reference of the epilogue (non-kernel dtypes)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_ACT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def kernel_activation(v, activation, op: str, dtypes: str, shapes: str):
    """float32 values v (any shape) as the kernels' write-out activates them (kernels/act_f32.c:
    the bits a value gets in any GEMM or convolution at this level and mode), for results with
    nothing to sum (K == 0, a convolution over an empty input): act(0 + v), from a linear of K = 1
    whose products are 0 (so -0 comes back +0, as the default mode's GEMM sums do; see the README's
    signed-zeros row). Returns float32, v's shape. With ONEPATH_VERBOSE, one line for the caller's
    call (``op``, ``dtypes``, ``shapes``: its own problem), kernel "bias_activation(no_reduction)",
    instead of the inner linear's."""
    v = np.asarray(v, F32)
    flat = np.ascontiguousarray(v.reshape(-1))
    if flat.size == 0:
        return flat.reshape(v.shape)
    t0 = time.perf_counter()
    with _verbose.muted():
        y = linear(np.zeros((1, 1), F32), np.zeros((flat.size, 1), F32), flat,
                   activation=activation)
    if _verbose.enabled():
        _verbose.emit(op, dtypes, isa(), "bias_activation(no_reduction)", shapes, 1,
                      time.perf_counter() - t0)
    return y.reshape(v.shape)


def _act_numpy(y, activation):
    """The activation of ``linear``'s numpy path, as its docstring states: relu is
    ``np.maximum(y, 0)``; gelu, gelu_tanh and silu are evaluated on ``y.astype(np.float64)`` and
    cast back to ``y.dtype``. Defined for float16/float32/float64 results; TypeError otherwise."""
    if activation is None:
        return y
    dt = np.result_type(y)
    if dt not in _ACT_DTYPES:
        raise TypeError(f"linear: activation {activation!r} is not defined for {dt} results "
                        "(float16, float32 and float64 only)")
    if activation == "relu":
        return np.maximum(y, 0)
    z = np.asarray(y, np.float64)
    with np.errstate(over="ignore"):
        if activation == "gelu":
            r = 0.5 * z * (1 + _erf(z / math.sqrt(2)))
        elif activation == "gelu_tanh":
            r = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
        elif activation == "silu":
            r = z / (1 + np.exp(-z))
        else:
            raise AssertionError(activation)
    return r.astype(dt)


def bias_array(bias, n: int) -> np.ndarray:
    """``linear``'s bias as an array of shape (n,), (1,) or () for the kernels: a Python int, float
    or bool is weak in numpy's promotion (NEP 50: it takes the other operand's dtype), so it becomes
    a float32 0-d array; anything else ``np.asarray(bias)``.

    Raises:
        ValueError: another shape (named in the message).
    """
    braw = np.asarray(bias, F32) if type(bias) in (int, float, bool) else np.asarray(bias)
    if braw.shape not in ((n,), (1,), ()):
        raise ValueError(f"linear: bias must have shape ({n},), (1,) or () (broadcast over the "
                         f"{n} output features), got {braw.shape}")
    return braw


def _ready(x: np.ndarray, dt) -> np.ndarray:
    return x if (x.dtype == dt and kernel_ready(x)) else np.array(x, dt)


def linear(x, weight, bias=None, *, activation=None, dtype=None):
    """``activation(x @ weight.T + bias)`` with the bias and activation fused in the kernel's write-out.

    Args:
        x: array (..., in_features), float32 or bfloat16 (the kernels); leading batch dimensions are
            kept. Other dtypes (float64, integers, ...) are computed by numpy as
            ``x @ weight.T + bias`` and the activation formula, in numpy's result dtype.
        weight: (out_features, in_features) array as torch.nn.Linear stores it, or a PackedWeight
            from ``onepath.prepack``.
        bias: None, (out_features,), or (1,) / 0-d (broadcast over the features, as torch does).
            The kernels apply a float32, bfloat16 or float16 bias in float32; a bias of any other
            dtype (float64, complex, integer, ...) sends the call to the numpy path below, whose
            result dtype it joins as numpy's ``+`` promotes.
        activation: None, "relu", "gelu" (exact, erf), "gelu_tanh" or "silu" (any letter case). The
            kernels evaluate erf/exp with polynomials (kernels/act_f32.c), 16 lanes for every
            element wherever it falls in the output; against float64 (measured, 640k values):
            gelu within 4.2e-7 and gelu_tanh within 5.2e-7 absolute, silu within 4.2 ulp.
        dtype: result dtype, None for the promotion rules (bfloat16 x bfloat16 -> bfloat16 rounded
            once after the epilogue; a float32 operand -> float32), or float32 / bfloat16 (with
            float32 / bfloat16 operands; another dtype is a TypeError).
    Returns:
        ndarray (..., out_features).
    Raises:
        ValueError: shape mismatch, unknown activation. TypeError: unsupported dtype request; an
            activation on a result dtype other than float16/float32/float64 (complex, integer,
            bool, object), naming the dtype.
    The numpy path (any operand neither float32 nor bfloat16, or a bias as above) returns exactly
    ``act((x @ weight.T + bias))`` followed by ``.astype(dtype)`` when ``dtype`` is given, where
    ``weight`` is the unpacked weight, ``bias`` the array as given (its dtype promotes as numpy's
    ``+`` does) and ``act`` is ``np.maximum(y, 0)`` for relu, and for gelu, gelu_tanh and silu
    the formulas ``0.5 z (1 + erf(z / sqrt 2))``, ``0.5 z (1 + tanh(sqrt(2 / pi) (z + 0.044715
    z^3)))``, ``z / (1 + exp(-z))`` on ``z = y.astype(np.float64)``, cast back to ``y.dtype``.
    """
    if dtype is None:
        # the kernels' activation code of an exact name (None: activation_name checks it below,
        # an unhashable one included)
        code = (_ACT_CODE.get(activation) if activation is None or type(activation) is str
                else None)
        # the tiniest float32 calls with a raw weight: one C call (kernels/pyfast.inc: the call of
        # _small.linear_fast below without its Python, the same bits; None for anything else;
        # empty while verbose is on and once the reproducible mode was ever used)
        fast = _fast_linear.get(_scoped_get())
        if fast is not None and code is not None and not _off_get():
            y = fast(x, weight, bias, code)
            if y is not None:
                return y
    if _repro_on():  # onepath.reproducible(): ops/_repro.py
        from ._repro import linear as _rl
        return _rl(x, weight, bias, activation, dtype)
    if dtype is None and type(x) is _ND and x.dtype is F32 and (bias is None or type(bias) is _ND):
        # small float32 calls: the small kernel straight away (None: take the checked path)
        y = _small.linear_fast(x, weight._weight if type(weight) is PackedWeight else weight, bias,
                               code, weight if type(weight) is PackedWeight else None)
        if y is not None:
            return y
    activation = activation_name(activation)
    packed = weight if isinstance(weight, PackedWeight) else None
    xa = np.asarray(x)
    if xa.ndim < 1:
        raise ValueError("linear: x must have at least one dimension (..., in_features)")
    w = None if packed else np.asarray(weight)
    wshape, wdtype = (packed.shape, packed.dtype) if packed else (w.shape, w.dtype)
    if len(wshape) != 2:
        raise ValueError(f"linear: weight must be (out_features, in_features), got shape {wshape}")
    n, k = wshape
    if xa.shape[-1] != k:
        raise ValueError(f"linear: x has {xa.shape[-1]} features, weight expects {k} (weight shape {wshape})")
    if packed is not None:
        packed.check_cap()  # every path, also those that read no packed buffer
    b = None
    braw = None if bias is None else bias_array(bias, n)
    rd = result_dtype(xa.dtype, wdtype, dtype)
    if braw is not None and braw.dtype not in _KERNEL_BIAS:
        rd = None  # a float64, complex, integer, ... bias promotes: numpy's expression, exactly
    lead = xa.shape[:-1]
    if rd is None:
        if dtype is not None and np.dtype(dtype) not in (F32, BF16) and xa.dtype in (F32, BF16):
            raise TypeError(f"linear: dtype must be float32 or bfloat16, got {np.dtype(dtype)}")
        t0 = time.perf_counter()
        wv = packed.weight() if packed else w
        y = xa @ wv.T
        if bias is not None:
            y = y + bias  # as given: numpy's promotion (a Python scalar stays weak)
        y = _act_numpy(y, activation)
        y = y.astype(dtype) if dtype is not None else y
        if _verbose.enabled():
            dts = ":".join(str(t) for t in (xa.dtype, wdtype, y.dtype))
            shp = "x".join(map(str, xa.shape)) + ":" + "x".join(map(str, wshape))
            _verbose.emit("linear", dts, "numpy", "numpy(x @ weight.T)", shp, 0,
                          time.perf_counter() - t0)
        return y
    if braw is not None:
        b = braw if braw.shape == (n,) else np.broadcast_to(braw.reshape(-1), (n,))
        b = np.ascontiguousarray(b, F32)
    x2 = xa.reshape(math.prod(lead), k) if xa.ndim != 2 else xa  # (-1 is ambiguous when k == 0)
    m = x2.shape[0]
    out = np.empty((m, n), rd)
    shapes = f"{m}x{k}:{n}x{k}"
    both_bf16 = xa.dtype == BF16 and wdtype == BF16
    if m == 0 or n == 0 or k == 0:
        dts = ""  # the verbose line's dtypes (packed: as the packed GEMM's lines)
        if _verbose.enabled():
            dts = ":".join(("packed" if packed is not None and i == 1 else _TAG.get(t, t.name))
                           for i, t in enumerate((xa.dtype, wdtype, rd)))
        if m == 0 or n == 0:
            if dts:
                _verbose.emit("linear", dts, "none", "empty_output", shapes, 0, 0.0)
        else:  # the bias, activated as the kernels' write-out activates it
            bias0 = b if b is not None else np.zeros(n, F32)
            out[...] = kernel_activation(bias0, activation, "linear", dts, shapes).astype(rd)
        return out.reshape(lead + (n,))
    if (rd == F32 and xa.dtype == F32 and wdtype == F32
            and _small.use_small(m * n * k, "linear", "float32", n * k,
                                 _small.thin_rows(m, packed),
                                 k if packed is None or m <= _small.NT_MAX_M else None, n)):
        wv = w if packed is None else packed._weight
        if packed is not None:
            packed.current()  # the cap rules of a PackedWeight hold on this path too
        # misaligned operands (e.g. unpickled) are copied, as matmul does, so that the path (and
        # so the bits) do not depend on where the data lies
        x2 = x2 if kernel_ready(x2) else np.array(x2, F32)
        wv = wv if kernel_ready(wv) else np.array(wv, F32)
        wt = packed.small_b() if packed is not None and m > _small.NT_MAX_M else None
        if _small.linear(x2, wv, out, b, act_code(activation), shapes, wt):
            return out.reshape(lead + (n,))
    if packed is not None and both_bf16 and m <= _RAW_DECODE_M:
        row, buf = packed.current_packed()   # (the cap rules hold here too)
        if row.level in _RAW_DECODE_LEVELS:
            run_gemm_bf16("linear", _ready(x2, BF16), packed._weight.T, out, bias=b,
                          activation=activation, shapes=shapes)
            return out.reshape(lead + (n,))
    if packed is not None and (both_bf16 or (xa.dtype == F32 and wdtype == F32)):
        row, buf = packed.current_packed()
        run_gemm_packed("linear", row.level, row, wdtype, _ready(x2, wdtype), buf, n, out,
                        bias=b, activation=activation, shapes=shapes)
    elif both_bf16:
        run_gemm_bf16("linear", _ready(x2, BF16), _ready(w, BF16).T, out, bias=b, activation=activation,
                      shapes=shapes)
    else:
        # float32 compute: float32 inputs, or a bfloat16 operand widened exactly (bf16 x f32 -> f32)
        wv = packed.weight() if packed else w
        a32 = to_float32(x2) if x2.dtype == BF16 else _ready(x2, F32)
        w32 = to_float32(wv) if wv.dtype == BF16 else _ready(wv, F32)
        tgt = out if rd == F32 else np.empty((m, n), F32)
        run_gemm("linear", a32, w32.T, tgt, bias=b, bias_axis=1, activation=activation,
                 row=registry.select("linear", "float32"), shapes=shapes)
        if tgt is not out:
            out[...] = to_bfloat16(tgt)
    return out.reshape(lead + (n,))
