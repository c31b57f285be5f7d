"""``onepath.PackedWeight`` and ``onepath.prepack``: a Linear weight packed once into the micro-panel
layout of the kernel in force, which ``linear`` (ops/linear.py) and ``matmul`` (ops/matmul.py) both
accept; kept apart from both so that neither imports the other for it."""
from __future__ import annotations

import threading

import numpy as np

from ..dispatch import registry
from ..dtypes import BF16, F32
from ._bf16 import pack_weight


class PackedWeight:
    """A weight (out_features, in_features) packed once into the micro-panel layout of the kernel
    the dispatcher selects (like oneDNN's reordered weights), reused by every ``linear`` /
    ``matmul`` call. Made by ``onepath.prepack``.

    Attributes:
        shape, dtype: of the weight (out_features, in_features); float32 or bfloat16.
        level: ISA level whose kernel layout the buffer holds; blocking: (MC, KC, NC) of that row.
        nbytes: size of the packed buffer. repacks: how many times a cap change forced a repack.
        on_cap_change: "repack" (default) or "error": what a call does when the ISA level in force
            (``onepath.max_isa``) no longer matches ``level``.
    The weight is snapshotted at prepack time: later writes to the original array do not reach
    the packed copy (pack again to pick them up).
    ``matmul(a, packed)``, ``a @ packed`` and ``numpy.matmul``-free code compute ``a @ weight.T``
    (``linear`` without bias); ``numpy.matmul(a, packed)`` raises numpy's TypeError (a PackedWeight
    is not an array: ``__array_ufunc__ = None``), and ``packed @ a`` raises TypeError.
    """

    __array_ufunc__ = None  # numpy defers ``ndarray @ packed`` to __rmatmul__

    def __rmatmul__(self, other):
        """``x @ packed``: ``onepath.matmul(x, packed)``, i.e. ``x @ weight.T``."""
        from .matmul import matmul_packed  # (at call time: matmul imports this module)
        return matmul_packed(other, self)

    def __init__(self, weight, *, on_cap_change: str = "repack"):
        mode = on_cap_change.lower() if isinstance(on_cap_change, str) else on_cap_change
        if mode not in ("repack", "error"):
            raise ValueError(f"on_cap_change must be 'repack' or 'error' (any letter case), got "
                             f"{on_cap_change!r}")
        on_cap_change = mode
        w = np.asarray(weight)
        if w.ndim != 2:
            raise ValueError(f"prepack expects a 2-D weight (out_features, in_features), got shape {w.shape}")
        if w.dtype.kind == "f" and w.dtype.itemsize == 4 and not w.dtype.isnative:
            w = w.astype(F32)  # float32 of the other byte order (">f4"), as matmul and linear take it
        if w.dtype not in (F32, BF16):
            raise TypeError(f"prepack supports float32 and bfloat16 weights, got {w.dtype}")
        self._weight = np.array(w, order="C", copy=True)
        self._wt = None  # float32: the weight transposed for the small kernel (small_b, on first use)
        self.shape = w.shape
        self.dtype = w.dtype
        self.on_cap_change = on_cap_change
        self.repacks = 0
        self._lock = threading.Lock()
        self._pack(self._select())

    @property
    def _dname(self) -> str:
        return "bfloat16" if self.dtype == BF16 else "float32"

    def _select(self):
        return registry.select("linear", self._dname)

    def _pack(self, row) -> None:
        row = registry.prepacked_row(row)   # (once per pack, not per call)
        buf, self.nbytes = pack_weight(row.level, self.dtype, self._weight.T)
        self.level = row.level
        self.blocking = (row.mc, row.kc, row.nc)
        self._state = (row, buf)  # replaced whole, never mutated: what a call reads together

    def current(self):
        """The registry row to run with, repacking (or raising) if the level in force changed."""
        return self.current_packed()[0]

    def check_cap(self) -> None:
        """For the calls that read no packed buffer (the unpacked weight, numpy's path, an empty
        product, reproducible mode): raise as ``current`` does when ``on_cap_change`` is "error"
        and the ISA level in force differs from ``level``; nothing otherwise (no repack: nothing
        reads the buffer). Raises RuntimeError."""
        if self.on_cap_change == "error":
            self.current_packed()

    def current_packed(self):
        """(registry row, packed buffer) to run with, read together: another thread whose cap
        differs may repack this weight for its own level while a call runs, and the call must keep
        the buffer of its row (reading the buffer after ``current()`` gave one thread another level's
        layout: found by the fresh-user review, 2026-12-05). Repacks (or raises) if the level in
        force changed."""
        row = self._select()
        state = self._state
        if row.level == state[0].level:
            return state
        if self.on_cap_change == "error":
            raise RuntimeError(
                f"prepacked weight {self.shape} was packed for ISA level {self.level!r} but the level "
                f"in force is {row.level!r} (onepath.max_isa changed); pack it again with "
                f"onepath.prepack(weight) or use on_cap_change='repack'")
        with self._lock:
            if row.level != self._state[0].level:
                self._pack(row)
                self.repacks += 1
            return self._state

    def small_b(self) -> np.ndarray:
        """The float32 weight transposed, (in_features, out_features) C-contiguous: B of
        ``x @ weight.T`` for the small kernel's "nn" form (rows of B contiguous: an 8 x 32 register
        tile, one B row and eight broadcasts per k), made on the first small call (one more copy
        of a weight small enough for that path), for calls of more than ``ops._small.NT_MAX_M``
        rows. The raw (out, in) weight gives the "nt" form (4 x 4 dot products, each reduced
        across a vector at the end), which ran 1.2-1.7x slower from 6 rows on and up to 1.3x
        faster at 1-3 (sapphirerapids, 1 thread, x (8, 384) @ W (384, 384).T: 81 against 133
        GFLOP/s)."""
        t = self._wt
        if t is None:
            t = self._wt = np.ascontiguousarray(self._weight.T)
        return t

    def __reduce__(self):
        """Pickle the unpacked weight and ``on_cap_change`` only: the receiving process packs it again
        for its own host and level (a packed buffer is tied to one ISA level's layout)."""
        return (PackedWeight, (self._weight,), {"on_cap_change": self.on_cap_change})

    def __setstate__(self, state):
        self.on_cap_change = state["on_cap_change"]

    def weight(self) -> np.ndarray:
        """The (snapshotted) unpacked weight, read-only view."""
        v = self._weight.view()
        v.flags.writeable = False
        return v

    def __repr__(self):
        return (f"onepath.PackedWeight(shape={self.shape}, dtype={self.dtype.name}, level={self.level!r}, "
                f"blocking={self.blocking}, nbytes={self.nbytes})")


def prepack(weight, *, on_cap_change: str = "repack") -> PackedWeight:
    """Pack a Linear weight (out_features, in_features), float32 or bfloat16, for reuse.

    Returns a ``PackedWeight`` that ``onepath.linear`` and ``onepath.matmul`` (as the right operand,
    meaning ``weight.T``) accept. It records the ISA level and blocking it was packed for; when the
    cap changes it is repacked (``on_cap_change="repack"``) or the call raises RuntimeError
    (``"error"``); it is never read with another level's layout.

    Results agree with the raw weight's to the op's rounding, not always to the last bit: a
    prepacked weight may run another kernel or blocking than the raw one (bfloat16 with
    in_features above the row's KC below the AMX level, products of 1-4 rows, the prepacked NC
    of ``registry.PREPACKED_NC``), which sums in another order. Under ``onepath.reproducible()``
    both give the same bits.
    """
    return PackedWeight(weight, on_cap_change=on_cap_change)
