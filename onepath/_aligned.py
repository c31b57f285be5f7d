"""Arrays whose data starts on a cache-line boundary (numpy guarantees only 16 bytes)."""
from __future__ import annotations

import math

import numpy as np


def empty_aligned(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data starts on an
    ``align``-byte boundary (default 64, a cache line): a view into a uint8 buffer ``align`` bytes
    longer, so it does not own its data (``ndarray.resize`` raises; ``.base`` is the buffer)."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    off = -raw.ctypes.data % align
    return raw[off:off + nbytes].view(dtype).reshape(shape)
