"""``onepath.attention``: multi-head self-attention of packed [q | k | v] token rows (the fused QKV
Linear's output of a BERT layer), softmax over the keys with an additive key mask, float32 /
bfloat16 in and out, float32 inside (kernels/attn.c)."""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from .. import _stats, _threads
from ..dtypes import BF16, F32

_CODES = {F32: 0, BF16: 1}


def attention(qkv, heads, mask=None, *, scale=None, dtype=None):
    """Multi-head self-attention: for each sequence and head, ``softmax(scale * q @ k.T + mask) @ v``
    over the keys, as ``torch.nn.functional.scaled_dot_product_attention`` with a float mask.

    Args:
        qkv: array (batch, seq, 3 * d), float32 or bfloat16: each token's row is [q | k | v], the
            heads side by side in each third (head h at h * d / heads), as a fused QKV Linear
            writes it (BERT, ``torch.nn.MultiheadAttention``'s packed projection).
        heads: number of heads (an int >= 1 dividing d).
        mask: None, or an additive float32 key mask of shape (batch, seq): mask[b, j] is added to
            every score of key j in sequence b (0 to attend, a large negative value such as -1e9,
            or -inf, to ignore the key). A sequence whose keys are all -inf gets a zero context, as
            torch's ``scaled_dot_product_attention`` gives it (a softmax over them would be NaN).
        scale: the factor of the scores; None: 1 / sqrt(d / heads). 1.0 when q is already scaled.
        dtype: result dtype, float32 or bfloat16; None: qkv's dtype. A bfloat16 result is rounded
            once, to nearest even.
    Returns:
        ndarray (batch, seq, d), the heads side by side (BERT's context layout).
    Raises:
        TypeError: qkv or mask of another dtype, dtype not float32 / bfloat16, heads not an int
            (a bool is refused), scale not a real number (a bool is refused). ValueError: qkv not
            3-D, its last axis not 3 * heads * a positive head size, heads < 1, mask of another
            shape, scale not finite in float32. MemoryError: scratch allocation.
    The scores, the softmax (exp: act_f32.c's polynomial, Cephes's split of ln 2; a probability
    below exp(-87) is 0) and the products run in float32 with one chain per element, one thread
    per (sequence, head) over ``onepath.get_num_threads()`` threads: the bits do not depend on the
    thread count or the ISA level.
    """
    q = np.asarray(qkv)
    if q.dtype not in _CODES:
        raise TypeError(f"attention: qkv must be float32 or bfloat16, got {q.dtype}")
    if q.ndim != 3:
        raise ValueError(f"attention: qkv must be (batch, seq, 3 * d), got shape {q.shape}")
    try:
        if isinstance(heads, (bool, np.bool_)):
            raise TypeError
        heads = operator.index(heads)
    except TypeError:
        raise TypeError(f"attention: heads must be an int, got {type(heads).__name__}") from None
    if heads < 1:
        raise ValueError(f"attention: heads must be >= 1, got {heads}")
    b, s, w = q.shape
    if w % (3 * heads) or w == 0:
        raise ValueError(f"attention: the last axis of qkv ({w}) is not 3 * heads ({heads}) * a head size")
    d = w // 3
    hd = d // heads
    if scale is None:
        scale = 1.0 / math.sqrt(hd)
    elif not isinstance(scale, numbers.Real) or isinstance(scale, (bool, np.bool_)):
        raise TypeError(f"attention: scale must be a real number, got {type(scale).__name__}")
    elif not abs(float(scale)) <= float(np.finfo(np.float32).max):
        raise ValueError(f"attention: scale {scale!r} is not a finite float32 (the scores are float32)")
    out_dt = q.dtype if dtype is None else np.dtype(dtype)
    if out_dt not in _CODES:
        raise TypeError(f"attention: dtype must be float32 or bfloat16, got {out_dt}")
    m = None
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype != F32:
            raise TypeError(f"attention: mask must be float32 (additive), got {m.dtype}")
        if m.shape != (b, s):
            raise ValueError(f"attention: mask has shape {m.shape}, expected (batch, seq) = {(b, s)}")
        m = np.ascontiguousarray(m)
    q = np.ascontiguousarray(q)
    y = np.empty((b, s, d), out_dt)
    if y.size == 0:
        return y
    from ..dispatch.cap import isa
    from ..kernels import load
    level = isa()
    mod = load(level)
    ffi = mod.ffi
    used = mod.lib.op_attention(b, s, heads, hd, ffi.cast("void *", q.ctypes.data), _CODES[q.dtype], w,
                                ffi.NULL if m is None else ffi.cast("const float *", m.ctypes.data), s,
                                float(scale), ffi.cast("void *", y.ctypes.data), _CODES[out_dt], d,
                                _threads.get_num_threads())
    if used < 0:
        raise MemoryError(f"attention: could not allocate scratch for qkv {q.shape}")
    _stats.record("attention", q.dtype.name, level)
    return y
