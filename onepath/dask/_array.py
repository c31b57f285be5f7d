"""onepath's matmul, linear and conv2d on ``dask.array`` arrays: the graph is built with
``dask.array.blockwise`` / ``map_overlap`` and every block runs onepath's in-memory kernel.

Semantics carried into the tasks: the ISA cap in force where the graph is built (``onepath.max_isa``
or ``ONEPATH_MAX_ISA``) caps the tasks too (a worker whose best level is lower runs its best), so a
graph built under ``with onepath.max_isa("avx2"):`` runs avx2 kernels on every worker.

Bit-identity: the kernels pick a different K blocking for products of at most MR rows (B read in
place) and a dot-product path for at most 4 rows (48 for a raw bfloat16 weight where the VDPBF16PS
variant is on: Zen 4), so a block of few rows cut from a taller operand
would round differently from the in-memory call. Such blocks are padded with zero rows to the row
count the whole problem runs with (at most ``_PAD_ROWS``), so chunks along the batch/row axes give
results bit-identical to ``onepath.matmul`` / ``linear`` / ``conv2d`` on the whole array.
"""
from __future__ import annotations

import collections
import contextlib
import math
import threading

import numpy as np

import dask.array as da
from dask.base import tokenize

import onepath
from ..dispatch import LEVELS
from ..dtypes import BF16, F32, to_bfloat16
from ..ops import _small
from ..ops.conv import route_batch
from ..ops._gemm import kernel_ready
from ..ops.matmul import small_form

# > every MR of the registry (float32 14, bfloat16 AMX 32) and > the rows of the dot-product paths
# (4; a raw or prepacked bfloat16 weight with VDPBF16PS: OP_SM_NKDP_MAX_M and OP_SM_PKDP_MAX_M = 48
# in kernels/gemm_bf16.c), = the rows from which the "widen_f32" variant runs (OP_DP_WIDEN_MIN_M)
_PAD_ROWS = 49
# The dot path's narrow rule (kernels/gemv_f32.c, op_gemv_f32: N <= 4 outputs at any row count, at
# every level): the in-memory linear on a raw float32 weight of this many outputs or fewer takes
# dot products, whose sums differ from the packed GEMM's on a prepacked weight
_DOT_N = 4


# ------------------------------------------------------------------------------------------------
# The ISA cap, carried from the client into the tasks


def _client_cap() -> str | None:
    """The cap in force where the graph is built, or None (tasks then use their host's best)."""
    from ..dispatch.cap import cap
    return cap()


def _capped(level: str | None):
    """``with onepath.max_isa(level)`` in a task; a host whose best level is below ``level`` runs
    its best (a cap is a ceiling, not a request). Raises ValueError for unknown level names."""
    if level is None:
        return contextlib.nullcontext()
    best = onepath.available_isas()[-1]
    if LEVELS.index(level) >= LEVELS.index(best):
        return contextlib.nullcontext()
    return onepath.max_isa(level)


def _pad_rows(x: np.ndarray, axis: int, full: int) -> int:
    """Rows to append along ``axis`` so a block of ``x`` runs the kernel path of the whole problem
    (``full`` rows along that axis); 0 when no padding is needed."""
    rows = x.shape[axis]
    target = min(full, _PAD_ROWS)
    return target - rows if 0 < rows < target else 0


def _columns_contiguous(x) -> bool:
    """True for an ndarray whose core matrices have contiguous columns and strided rows (Fortran
    order, ``W.T``): ``ops.matmul.small_form`` sees another form than in C order."""
    return (isinstance(x, np.ndarray) and x.ndim >= 2 and x.shape[-1] > 1 and x.shape[-2] > 1
            and x.strides[-2] == x.itemsize and x.strides[-1] != x.itemsize)


def _padded(x: np.ndarray, axis: int, extra: int, order: str = "C") -> np.ndarray:
    """``x`` with ``extra`` zero rows appended along ``axis``, its core matrices in ``order`` ("F":
    a block of an operand with contiguous columns, so that the padded block takes the path the
    in-memory operand's layout takes: ``ops.matmul.small_form``; the small linear and bfloat16
    kernels read only contiguous rows)."""
    if not extra:
        return x
    shape = list(x.shape)
    shape[axis] = x.shape[axis] + extra
    out = (np.swapaxes(np.empty(shape[:-2] + shape[:-3:-1], x.dtype), -1, -2) if order == "F"
           else np.empty(shape, x.dtype))
    shape[axis] = extra
    return np.concatenate([x, np.zeros(shape, x.dtype)], axis=axis, out=out)


def _rows_strided(x) -> bool:
    """True for an ndarray whose 2-D view that linear computes on (``x.reshape(-1, k)``: a view
    where numpy can make one) linear reads in place with rows not contiguous (aligned, whole
    element strides, the column stride not one element: Fortran order, ``x[..., ::2]``,
    ``x[..., ::-1]``, one such row): in memory it takes the packed GEMM (the small kernel's nt
    form and the dot path read contiguous rows), and its blocks are given such rows too
    (``_strided_rows``)."""
    if not isinstance(x, np.ndarray) or x.ndim < 1 or x.shape[-1] < 2 or not kernel_ready(x):
        return False
    x2 = x
    if x.ndim != 2:   # (never a copy of the whole x here)
        try:
            try:
                x2 = np.reshape(x, (-1, x.shape[-1]), copy=False)   # numpy >= 2.1
            except TypeError:
                x2 = x.view()
                x2.shape = (-1, x.shape[-1])
        except (ValueError, AttributeError):   # linear's reshape copies, in C order: rows contiguous
            return False
    return x2.strides[1] != x2.itemsize


def _strided_rows(x2: np.ndarray) -> np.ndarray:
    """``x2`` (rows, k) with its values and rows not contiguous: itself, Fortran order, or for one
    row a copy whose elements lie two apart (a Fortran-ordered row is contiguous)."""
    if x2.strides[1] != x2.itemsize or x2.shape[1] < 2:
        return x2
    if x2.shape[0] > 1:
        return np.asfortranarray(x2)
    buf = np.empty((x2.shape[0], 2 * x2.shape[1]), x2.dtype)
    buf[:, ::2] = x2
    return buf[:, ::2]


def _in_order(x: np.ndarray, order: str | None) -> np.ndarray:
    """A block ``x`` of an operand whose core order was ``order`` in memory ("C" or "F"; None:
    unknown, a dask operand's blocks as they come), copied into that order if it arrived otherwise
    (dask copies a slice it cuts from a block in C order: a batch axis re-cut to the other
    operand's chunks, found by the review)."""
    if order == "F" and x.ndim >= 2 and not _columns_contiguous(x) and x.size > 1:
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)
    if order == "C" and _columns_contiguous(x):
        return np.ascontiguousarray(x)
    return x


def _order_of(x) -> str | None:
    """The core order of an in-memory operand ("F": contiguous columns, strided rows; "C": any
    other array_like, which matmul reads as C or copies so), None for a dask array."""
    return None if isinstance(x, da.Array) else "F" if _columns_contiguous(x) else "C"


def _aligned(x: np.ndarray) -> np.ndarray:
    """``x``, or an aligned copy in its own memory order where it arrived misaligned (a block
    unpickled by distributed may be): matmul would copy it in C order and so take another form
    of the small kernel than the aligned in-memory operand."""
    return x if x.flags.aligned else np.array(x, order="K")


def _as_dask(x, name: str, keep_columns: bool = False):
    """``x`` as a dask array. ``keep_columns`` (a product's operand): an ndarray whose core
    matrices have contiguous columns and strided rows (Fortran order, ``W.T``) gives blocks laid
    out so too (dask copies what it wraps in C order), so a block takes the small kernel's form
    the in-memory operand takes (``ops.matmul.small_form``)."""
    if isinstance(x, da.Array):
        return x
    if isinstance(x, onepath.PackedWeight):
        raise TypeError(f"onepath.dask: {name} must be an array, not a PackedWeight (pass the "
                        "unpacked weight; the workers prepack it themselves)")
    if keep_columns and _columns_contiguous(x):
        return da.asarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    return da.asarray(x)


# ------------------------------------------------------------------------------------------------
# matmul


def _gemm_path(small: bool):
    """The kernel path of the whole problem for one block: the small kernel when the whole problem
    takes it (``ops._small.on``: a thin problem takes it on the client's threads, and a worker of
    one thread would not), else the small path off (``ops._small.off``), so that a block the small
    kernel would take rounds as the packed GEMM of the whole problem does."""
    return _small.on() if small else _small.off()


def _mm_block(a, b, *, level, full_m, small, orders=(None, None)):
    """One (..., M_i, K_j) x (..., K_j, N_l) product in float32 (bfloat16 operands accumulate in
    float32 here; the result is rounded once after the contraction sum), with the contraction axis
    put back as a size-1 axis for the reduction (as ``dask.array.matmul`` does). ``small``: the
    whole problem's small-kernel decision per form of the float32 small kernel ("nn", "nt",
    "any": ``ops.matmul.small_form``); the block's operands, blocks of the in-memory ones in
    their core ``orders`` (``_order_of``), pick."""
    a, b = _in_order(_aligned(a), orders[0]), _in_order(_aligned(b), orders[1])
    rows = a.shape[-2]
    ap = _padded(a, a.ndim - 2, _pad_rows(a, -2, full_m),
                 "F" if orders[0] == "F" or _columns_contiguous(a) else "C")
    form = small_form(ap, b) if a.dtype == b.dtype == F32 else "nn"
    with _capped(level), _gemm_path(small[form]):
        c = onepath.matmul(ap, b, dtype=F32)
        if ap is not a:
            c = c[..., :rows, :]
    return c[..., np.newaxis, :]


def _sum_parts(parts, axis=None, dtype=None, keepdims=None):
    """Chunk/aggregate function of the contraction sum: ``parts`` is one block or a list of blocks
    of identical shape with a size-1 contraction axis; they are added elementwise in float32."""
    if isinstance(parts, list):
        out = parts[0]
        for p in parts[1:]:
            out = np.add(out, p, dtype=F32)
    else:
        out = parts
    return out if keepdims else out.squeeze(axis[0])


def _round_bf16(x, *, level):
    with _capped(level):
        return to_bfloat16(x)


def matmul(a, b):
    """``onepath.matmul(a, b)`` on dask arrays (numpy.matmul semantics: 1-D operands, broadcast
    batch axes), built like ``dask.array.matmul``: one ``blockwise`` product per pair of blocks
    (onepath's kernel, float32 accumulation), then the contraction-axis chunks summed by a tree
    reduction (float32) without concatenating them.

    Args:
        a: dask array or array_like, (..., M, K) or (K,); float32 or bfloat16.
        b: dask array or array_like, (..., K, N) or (K,); float32 or bfloat16. The K chunks of
            ``a`` and ``b`` are unified by dask (rechunked when they differ).
    Returns:
        dask array of the in-memory result's shape and dtype: float32, or bfloat16 for bfloat16 x
        bfloat16 (accumulated in float32 across every K chunk and rounded to bfloat16 once at the
        end, never per block). Any other dtype pair is ``dask.array.matmul(a, b)`` (numpy's result).
    Raises:
        ValueError: a scalar operand, or core dimensions that do not match (shapes in the message).
    Chunks split only along M or the batch axes: bit-identical to ``onepath.matmul`` on the whole
    arrays; chunks along K: the sum order differs, within the float32 GEMM error bound.
    """
    orders = (_order_of(a), _order_of(b))
    a, b = _as_dask(a, "a", True), _as_dask(b, "b", True)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"onepath.dask.matmul: scalar operands are not allowed (shapes {a.shape} and {b.shape})")
    ka, kb = a.shape[-1], b.shape[-2 if b.ndim > 1 else 0]
    if ka != kb:
        raise ValueError(f"onepath.dask.matmul: core dimension mismatch, a {a.shape} @ b {b.shape} "
                         f"(K {ka} != {kb})")
    if not {a.dtype, b.dtype} <= {F32, BF16}:
        return da.matmul(a, b)
    out_dtype = BF16 if (a.dtype == BF16 and b.dtype == BF16) else F32
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1:
        a = a[np.newaxis, :]
    if b1:
        b = b[:, np.newaxis]
    if a.ndim < b.ndim:
        a = a[(np.newaxis,) * (b.ndim - a.ndim)]
    elif b.ndim < a.ndim:
        b = b[(np.newaxis,) * (a.ndim - b.ndim)]
    nd = a.ndim
    lhs = tuple(range(nd))                                # (..., m, k)
    rhs = tuple(range(nd - 2)) + (nd - 1, nd)             # (..., k, n)
    out_ind = tuple(range(nd + 1))                        # (..., m, k, n): no contraction here
    level = _client_cap()
    # the path the in-memory call takes (decided here, where it would run): both operands of one
    # dtype (bfloat16 only without batch axes), and each core product's M*N*K within the small
    # kernel's limit
    mnk, kn = a.shape[-2] * b.shape[-1] * ka, b.shape[-1] * ka
    one = nd == 2 or math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) == 1
    n = b.shape[-1] if one else None   # (ROW_LIMITS: a 2-D product or a batch of one)

    def decide(nt_k):  # in memory, nt_k is K for the nt form (b = W.T), None for the others
        return (a.dtype == b.dtype
                and (_small.use_small(mnk, "matmul", a.dtype.name, kn, a.shape[-2], nt_k=nt_k, n=n)
                     if nd == 2 else
                     a.dtype == F32 and _small.use_small_batched(mnk, kn, a.shape[-2], nt_k, n=n)))
    # the in-memory decision depends on the operands' layout (matmul's small_form), which the
    # blocks have (blocks of the in-memory operands): decided here for each form, picked there
    nn = decide(None)
    small = {"nn": nn, "nt": decide(ka) if a.dtype == F32 else nn, "any": nn and mnk <= _small.ANY_MAX}
    parts = da.blockwise(_mm_block, out_ind, a, lhs, b, rhs, adjust_chunks={nd - 1: 1},
                         dtype=F32, concatenate=False, level=level, full_m=a.shape[-2], small=small,
                         orders=orders, meta=np.empty((0,) * (nd + 1), F32))
    if parts.numblocks[-2] == 1:
        out = parts.squeeze(-2)
    else:
        out = da.reduction(parts, _sum_parts, _sum_parts, axis=-2, dtype=F32, concatenate=False,
                           meta=np.empty((0,) * nd, F32))
    if out_dtype == BF16:
        out = out.map_blocks(_round_bf16, dtype=BF16, level=level, meta=np.empty((0,) * nd, BF16))
    if a1:
        out = out.squeeze(-2)
    if b1:
        out = out.squeeze(-1)
    return out


# ------------------------------------------------------------------------------------------------
# linear: the weight is one dask key (fetched once per worker), prepacked once per worker


_PACKED: "collections.OrderedDict[tuple, onepath.PackedWeight]" = collections.OrderedDict()
_PACKED_MAX = 256  # weights kept packed per worker process (least recently used dropped first)
_pack_lock = threading.Lock()
PACK_COUNT = 0  # prepacks done in this process (read by the tests through client.run)


def _packed_weight(token: str, w: np.ndarray):
    """The PackedWeight of the weight named ``token`` in this process: packed at its first block
    and reused by every later block (a PackedWeight repacks itself if the cap changes)."""
    global PACK_COUNT
    with _pack_lock:
        p = _PACKED.get(token)
        if p is not None:
            _PACKED.move_to_end(token)
            return p
        # C order: a weight merged from dask chunks may arrive otherwise, and the small kernel
        # (the path the in-memory call takes for small problems) reads contiguous weight rows
        p = onepath.prepack(np.ascontiguousarray(w))
        PACK_COUNT += 1
        _PACKED[token] = p
        while len(_PACKED) > _PACKED_MAX:
            _PACKED.popitem(last=False)
        return p


def _linear_block(x, w, b=None, *, wkey, activation, out_dtype, level, full_m, small=False,
                  order=None, rows_strided=False):
    with _capped(level), _gemm_path(small):
        # a whole problem of fewer than _PAD_ROWS rows runs the raw weight's small-M paths in memory
        # (dot products, whose sums differ from a prepacked weight's), and so does one of _DOT_N
        # outputs or fewer at any row count; one the small kernel takes runs its nt form (a
        # prepacked weight: the nn form): the blocks of all three read the weight raw too
        if full_m < _PAD_ROWS or small or w.shape[0] <= _DOT_N:
            wk = np.ascontiguousarray(w)
        else:
            wk = _packed_weight(wkey, w) if w.dtype in (F32, BF16) and x.dtype in (F32, BF16) else w
        lead = x.shape[:-1]
        # (x's core order as in memory: order, _order_of; -1 is ambiguous when K == 0)
        x2 = _in_order(_aligned(x), order).reshape(int(np.prod(lead)), x.shape[-1])
        extra = _pad_rows(x2, 0, full_m)
        xp = _padded(x2, 0, extra, "F" if _columns_contiguous(x2) else "C")
        # rows not contiguous in memory (_rows_strided): not in the block either
        y = onepath.linear(_strided_rows(xp) if rows_strided else xp, wk, b,
                           activation=activation, dtype=out_dtype)
        return y[: x2.shape[0]].reshape(lead + (y.shape[-1],))


def linear(x, weight, bias=None, *, activation=None, dtype=None):
    """``onepath.linear(x, weight, bias, activation=...)`` for a dask ``x`` chunked along its rows.

    Args:
        x: dask array (..., in_features), float32 or bfloat16, chunked along any leading axes (the
            feature axis is rechunked to one chunk if it is split).
        weight: array (out_features, in_features) small enough for every worker to hold: it
            becomes one key of the graph (a numpy array under a name derived from its content; a
            dask array, e.g. one persisted across computations, is merged into one chunk), fetched
            once by each worker and prepacked there once (``onepath.prepack``, cached per worker
            process under that key) for all its blocks; a whole problem of fewer than 49 rows
            (``_PAD_ROWS``), of 4 outputs or fewer (``_DOT_N``) or small enough for the small
            kernel reads it raw, as the in-memory call's dot-product and small paths do.
        bias: None or (out_features,), numpy or dask. activation: None, "relu", "gelu", "gelu_tanh", "silu".
        dtype: as ``onepath.linear`` (None: its promotion rules).
    Returns:
        dask array (..., out_features), chunked like ``x``'s leading axes; bit-identical to
        ``onepath.linear`` on the whole array.
    Raises:
        ValueError: weight not 2-D, feature mismatch, bias shape, unknown activation (as
            ``onepath.linear``, checked when the graph is built). TypeError: a PackedWeight.
    """
    order, rows_strided = _order_of(x), _rows_strided(x)
    x = _as_dask(x, "x", True)
    if isinstance(weight, onepath.PackedWeight):
        raise TypeError("onepath.dask.linear: weight must be an array (out_features, in_features), not "
                        "a PackedWeight: the workers prepack it themselves, once each")
    if x.ndim < 1:
        raise ValueError("onepath.dask.linear: x must have at least one dimension (..., in_features)")

    wd, w = _operand(weight, "weight")
    bd, b = (None, None) if bias is None else _operand(bias, "bias")
    # the checks and the result dtype of the in-memory op, on an empty block
    meta = onepath.linear(np.empty((0, x.shape[-1]), x.dtype), w, b, activation=activation, dtype=dtype)
    if x.numblocks[-1] > 1:
        x = x.rechunk({x.ndim - 1: -1})
    nd = x.ndim
    ind = tuple(range(nd))
    full_m = int(np.prod(x.shape[:-1])) if nd > 1 else 1
    # The output takes x's index with the feature axis resized (no contraction index), and the
    # weight and bias enter as single keys (index None): dask then fuses chains of these blocks
    # with the blockwise operations around them into one task per block.
    return da.blockwise(_linear_block, ind, x, ind, wd, None, *([bd, None] if bd is not None else []),
                        adjust_chunks={nd - 1: meta.shape[-1]}, wkey=f"{wd.key}-{w.dtype.str}",
                        activation=activation, out_dtype=dtype, level=_client_cap(), full_m=full_m,
                        order=order, rows_strided=rows_strided,
                        small=(x.dtype == w.dtype == F32
                               and _small.use_small(full_m * w.shape[0] * w.shape[1], "linear",
                                                    "float32", w.shape[0] * w.shape[1], full_m,
                                                    w.shape[1], w.shape[0])),  # (raw weight: nt)
                        meta=np.empty((0,) * nd, meta.dtype))


def _operand(v, kind):
    """A weight or bias as one graph key (a Delayed: read whole by every block, fetched once per
    worker) and an in-memory stand-in of its shape and dtype for the checks."""
    import dask
    if isinstance(v, da.Array):
        stand_in = np.broadcast_to(np.zeros((), v.dtype), v.shape)
        if v.ndim == 0:
            return dask.delayed(v), stand_in
        return v.rechunk(v.shape).to_delayed().ravel()[0], stand_in
    v = np.asarray(v)
    return dask.delayed(v, pure=True, name=f"onepath-{kind}-{tokenize(v)}"), v


# ------------------------------------------------------------------------------------------------
# conv2d: blocks along N (map_blocks) and along H (map_overlap, halo = the kernel's reach)


def _pair(v, what):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            v = (v[0], v[0])
        if len(v) != 2:
            raise ValueError(f"onepath.dask.conv2d: {what} must be an int or 2 ints, got {v!r}")
        return tuple(int(x) for x in v)
    return (int(v), int(v))


def _pads(padding, k, dil):
    """((top, bottom), (left, right)) of conv2d's padding argument (already validated by
    onepath.conv2d; "same" puts the odd row/column after, as PyTorch does)."""
    if isinstance(padding, str):
        if padding.lower() == "valid":
            return ((0, 0), (0, 0))
        return tuple((d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2) for kk, d in zip(k, dil))
    if isinstance(padding, (tuple, list)) and any(isinstance(p, (tuple, list)) for p in padding):
        return tuple((int(a), int(b)) for a, b in padding)
    p = _pair(padding, "padding")
    return ((p[0], p[0]), (p[1], p[1]))


def _h_plan(chunks, pt, pb, sh, reach, oh):
    """Per H block: (first input row, end row, top pad, bottom pad) in block-local rows of the
    overlapped block, and its output rows. Block i computes the output rows whose window starts
    (in padded coordinates) inside its own rows; the window's reach comes from the halo."""
    h = sum(chunks)
    starts = np.cumsum((0,) + tuple(chunks))
    hp = h + pt + pb
    plan, out_rows = [], []
    for i in range(len(chunks)):
        s0 = 0 if i == 0 else int(starts[i]) + pt
        e0 = hp if i == len(chunks) - 1 else int(starts[i + 1]) + pt
        o_first, o_end = -(-s0 // sh), min(-(-e0 // sh), oh)
        n = max(0, o_end - o_first)
        if n == 0:
            plan.append(None)
        else:
            a, b = o_first * sh - pt, (o_end - 1) * sh + reach + 1 - pt
            top, bottom = max(0, -a), max(0, b - h)
            lo, hi = max(a, 0) - int(starts[i]), min(b, h) - int(starts[i])
            plan.append((lo, hi, top, bottom))
        out_rows.append(n)
    return tuple(plan), tuple(out_rows)


def _conv_block(x, *, w, b, h_ax, hplan, block_id=None, out_shape, out_dtype, kw, level, full_n):
    """One block of conv2d: the rows of the plan for this H block, its padding, the batch padded
    (zero images) to the in-memory problem's GEMM path when the block has few output pixels, and
    the in-memory batch's choice of formulation (ops.conv.route_batch)."""
    plan = hplan[block_id[h_ax]]
    if plan is None:
        shape = list(out_shape)
        shape[0], shape[h_ax] = x.shape[0], 0
        return np.empty(shape, out_dtype)
    lo, hi, top, bottom = plan
    idx = [slice(None)] * 4
    idx[h_ax] = slice(lo, hi)
    xs = x[tuple(idx)]
    pads = ((top, bottom), kw["pads_w"])
    n = xs.shape[0]
    with _capped(level):
        ohw = max(1, kw["ohw"])
        need = min(full_n, -(-_PAD_ROWS // ohw))
        extra = need - n if 0 < n < need else 0
        with route_batch(full_n):   # the NCHW / NHWC formulation of the whole batch's call
            y = onepath.conv2d(_padded(xs, 0, extra), w, b, kw["stride"], pads, kw["dilation"],
                               kw["groups"], layout=kw["layout"], activation=kw["activation"],
                               dtype=kw["dtype"])
        return y[:n] if extra else y


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, layout="NCHW",
           activation=None, dtype=None):
    """``onepath.conv2d`` (torch.nn.functional.conv2d semantics) on a dask ``input`` chunked along
    the batch axis N and/or the image height H.

    Args:
        input: dask array (N, C, H, W) (``layout="NHWC"``: (N, H, W, C)), float32 or bfloat16 (or
            float64, which onepath computes with numpy). Chunks along C and W are merged (one chunk
            each). Along H the blocks go through ``dask.array.map_overlap`` with a halo of the
            kernel's reach, ``dilation_h * (KH - 1)`` rows after each block (chunks smaller than the
            halo are merged with their neighbour, as map_overlap itself does); each block computes
            the output rows whose window starts in its own rows, so any stride, dilation and
            padding split exactly (output H chunks follow from the input's).
        weight: (OC, C/groups, KH, KW), numpy or dask; one key of the graph (fetched once per worker).
        bias, stride, padding, dilation, groups, layout, activation, dtype: as ``onepath.conv2d``.
    Returns:
        dask array of ``onepath.conv2d``'s result shape and dtype, chunked along N like ``input``.
        Chunks along N only: bit-identical to ``onepath.conv2d`` on the whole array; along H:
        within the float32 GEMM error bound of it.
    Raises:
        ValueError / TypeError: as ``onepath.conv2d`` (checked when the graph is built, shapes in
        the message); ValueError for an unbatched (3-D) input; TypeError for a PackedWeight.
    """
    x = _as_dask(input, "input")
    if isinstance(weight, onepath.PackedWeight):
        raise TypeError("onepath.dask.conv2d: weight must be an array (OC, C/groups, KH, KW), not a PackedWeight")
    wd, w = _operand(weight, "weight")
    bd, b = (None, None) if bias is None else _operand(bias, "bias")
    if x.ndim != 4:
        raise ValueError(f"onepath.dask.conv2d: expected a batched 4-D input, got shape {x.shape} "
                         "(add the batch axis with x[None])")
    if not isinstance(layout, str) or layout.upper() not in ("NCHW", "NHWC"):
        raise ValueError(f"onepath.dask.conv2d: unknown layout {layout!r}; valid: NCHW, NHWC")
    nhwc = layout.upper() == "NHWC"
    h_ax, w_ax, c_ax = (1, 2, 3) if nhwc else (2, 3, 1)
    # every check of the in-memory op, and its output shape and dtype, on an empty batch
    meta = onepath.conv2d(np.empty((0,) + x.shape[1:], x.dtype), w, b, stride, padding, dilation,
                          groups, layout=layout, activation=activation, dtype=dtype)
    oh, ow = meta.shape[h_ax], meta.shape[w_ax]
    st, dl = _pair(stride, "stride"), _pair(dilation, "dilation")
    (pt, pb), pads_w = _pads(padding, w.shape[2:], dl)
    reach = dl[0] * (w.shape[2] - 1)
    x = x.rechunk({c_ax: -1, w_ax: -1})
    if x.numblocks[h_ax] > 1 and reach > 0:
        if reach >= x.shape[h_ax]:
            x = x.rechunk({h_ax: -1})
        else:
            from dask.array.overlap import ensure_minimum_chunksize
            x = x.rechunk({h_ax: ensure_minimum_chunksize(reach, x.chunks[h_ax])})
    hplan, out_h = _h_plan(x.chunks[h_ax], pt, pb, st[0], reach, oh)
    out_chunks = [x.chunks[0], None, None, None]
    out_chunks[h_ax], out_chunks[w_ax], out_chunks[c_ax] = out_h, (ow,), (meta.shape[c_ax],)
    kw = dict(stride=st, dilation=dl, groups=groups, layout=layout, activation=activation,
              dtype=dtype, pads_w=pads_w, ohw=oh * ow)
    common = dict(w=wd, b=bd,
                  h_ax=h_ax, hplan=hplan, out_shape=meta.shape, out_dtype=meta.dtype, kw=kw,
                  level=_client_cap(), full_n=x.shape[0], chunks=tuple(out_chunks), dtype=meta.dtype,
                  meta=np.empty((0,) * 4, meta.dtype))
    if x.numblocks[h_ax] == 1 or reach == 0:
        return x.map_blocks(_conv_block, **common)
    return da.map_overlap(_conv_block, x, depth={h_ax: (0, reach)}, boundary="none", trim=False,
                          align_arrays=False, **common)
