"""bfloat16 plumbing between the numpy front ends and the C kernels (kernels/api_bf16.h).

``run_gemm_bf16`` is ``_gemm.run_gemm``'s counterpart for bfloat16 A and B (C float32 or bfloat16,
rounded once); ``run_gemm_packed`` multiplies by a prepacked weight (``onepath.prepack``).
``build`` forces a kernel build by name (tests run the emulated AMX build, "amx_emu", that way).
"""
from __future__ import annotations

import math
import time

import numpy as np

from .. import _stats, _threads, _verbose
from .._aligned import empty_aligned
from ..dispatch import registry
from ..dtypes import BF16, F32
from ..kernels import load
from ._gemm import act_code, batch_offsets, offsets_ptr

_TAG = {F32: "f32", BF16: "bf16"}


def _epilogue(ffi, bias, bias_axis, activation):
    code = act_code(activation)
    if bias is None and not code:
        return ffi.NULL, None
    epi = ffi.new("op_epilogue *")
    keep = None
    if bias is not None:
        keep = np.asarray(bias)
        if keep.dtype != F32:
            keep = keep.astype(F32)
        epi.bias = ffi.cast("const float *", keep.ctypes.data)
        epi.bias_stride = keep.strides[0] // keep.itemsize if keep.ndim else 0
        epi.bias_axis = bias_axis
    epi.act = code
    return epi, keep


_VARIANTS: dict = {}  # level -> the variant flags set in its module (registry.BF16_VARIANTS)
_FLAGS = registry.BF16_VARIANT_FLAGS  # kernels/api_bf16.h, op_gemm_bf16_set_variants


def set_variants(level: str, names=None) -> frozenset:
    """Set the per-microarchitecture kernel variants of ``level``'s bfloat16 module: ``names`` among
    ``"decode_vdpbf16ps"`` (small-M products, m <= 4, multiply with VDPBF16PS instead of widening
    to float32), ``"a_in_place"`` (the VDPBF16PS GEMM reads a row-major A in place instead of
    packing it), ``"c_bf16_in_register"`` (it writes a bfloat16 C from its registers, or at the
    AMX level from the tiles' scratch, rounded once, when one KC block holds all of K),
    ``"thin_nc"`` (with at most 256 rows it sweeps B in blocks of at most 256 columns),
    ``"next_panel_l2"`` (the driver fetches the next B micro-panel into L2 during the current one),
    ``"widen_f32"`` (from 49 rows, at a VDPBF16PS level, a product runs avx512_core's float32
    kernels on widened operands, with avx512_core's blocking) and ``"depth_chunks"`` (the AMX GEMM
    passes each B micro-panel in depth chunks of 256, every row panel per chunk; the same sums);
    None: the registry's
    ``BF16_VARIANTS`` rule for this host. A level lacking one keeps it off. Returns the previous
    set (empty before the first call).

    Raises:
        ValueError: an unknown variant name."""
    prev = _VARIANTS.get(level, frozenset())
    want = registry.bf16_variants(level) if names is None else frozenset(names)
    bad = sorted(want - _FLAGS.keys())
    if bad:
        raise ValueError(f"unknown bfloat16 kernel variant(s) {bad}; known: {sorted(_FLAGS)}")
    got = load(level).lib.op_gemm_bf16_set_variants(sum(_FLAGS[v] for v in want))
    _VARIANTS[level] = frozenset(v for v, bit in _FLAGS.items() if got & bit)
    return prev


def _module(level: str):
    if level not in _VARIANTS:
        set_variants(level)
    return load(level)


def _row_and_module(op: str, build: str | None, dtype: str = "bfloat16"):
    if build is None:
        row = registry.select(op, dtype)
        return row, row.level, _module(row.level)
    return None, build, _module(build)


_BLK: dict = {}  # (module's ffi, mc, kc, nc) of a registry row -> its op_blocking struct (built once)


def _blocking(ffi, row):
    if row is None:
        return ffi.NULL
    key = (id(ffi), row.mc, row.kc, row.nc)  # (hashing the row itself cost ~1 us per call)
    blk = _BLK.get(key)
    if blk is None:
        blk = _BLK[key] = ffi.new("op_blocking *", {"mc": row.mc, "kc": row.kc, "nc": row.nc})
    return blk


# kernels/gemm_bf16.c, OP_DP_WIDEN_MIN_M: the rows from which the "widen_f32" variant runs a product
# on the float32 kernels (tests check the two agree through op_gemm_bf16_kernel_for)
WIDEN_MIN_M = 49
_WIDEN_ROW: dict = {}  # op -> avx512_core's bfloat16 row
registry.on_clear(_WIDEN_ROW.clear)   # rows (and their blocking) replaced: look them up again


def _blocking_row(op: str, level: str, row, m: int):
    """The row whose blocking the kernel runs with: ``row``, or, where the "widen_f32" variant takes
    the product (``m`` >= WIDEN_MIN_M), avx512_core's bfloat16 row of ``op``: the float32 kernels
    it runs are avx512_core's, and with that row's blocking they give avx512_core's bits."""
    if row is None or m < WIDEN_MIN_M or "widen_f32" not in _VARIANTS.get(level, ()):
        return row
    core = _WIDEN_ROW.get(op)
    if core is None:
        core = _WIDEN_ROW[op] = registry.select(op, "bfloat16", level="avx512_core")
    return core


def _check(used, name, shapes):
    """Raise for a negative thread count from the kernel; ``name()`` gives the kernel's name."""
    if used >= 0:
        return
    if used == -2:
        raise RuntimeError(f"{name()}: the emulated AMX tile unit reported a fault (tile misuse) for {shapes}")
    raise MemoryError(f"{name()}: could not allocate packing buffers for {shapes}")


def _data(ffi, x: np.ndarray, elem: str = "uint16_t"):
    """Pointer to x's first element: ``from_buffer`` for C-contiguous arrays (about 0.3 us against
    1.2 for numpy's ``ctypes.data``), else the address numpy reports (strided views)."""
    if x.flags.c_contiguous and x.size:
        return ffi.from_buffer(elem + "[]", x, require_writable=False)
    return ffi.cast(elem + " *", x.ctypes.data)


def _offsets(ffi, x: np.ndarray, batch_shape: tuple, keep: list):
    off = batch_offsets(x, batch_shape)
    keep.append(off)
    return offsets_ptr(ffi, off)


def run_gemm_bf16(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, *, bias=None, bias_axis=1,
                  activation=None, build: str | None = None, shapes="") -> str:
    """C[..., M, N] = A @ B (+ bias, activation), A and B bfloat16, C float32 or bfloat16 (written in
    place, rounded once). All must be kernel-ready (aligned, whole-element strides). ``shapes``: the
    problem's text for errors and verbose lines, or a callable returning it (built only then).
    Returns the level (or build) that ran."""
    row, level, mod = _row_and_module(op, build)
    ffi, lib = mod.ffi, mod.lib
    batch_shape = c.shape[:-2]
    m, n = c.shape[-2:]
    k = a.shape[-1]
    ia, ib, ic = a.itemsize, b.itemsize, c.itemsize
    keep: list = []  # batch offset arrays, alive until the call returns
    if batch_shape:
        nbatch = math.prod(batch_shape)
        a_off, b_off, c_off = (_offsets(ffi, x, batch_shape, keep) for x in (a, b, c))
    else:
        nbatch, a_off, b_off, c_off = 1, ffi.NULL, ffi.NULL, ffi.NULL
    epi, _keep = _epilogue(ffi, bias, bias_axis, activation)
    verbose = _verbose.enabled()
    t0 = time.perf_counter() if verbose else 0.0
    sa, sb, sc = a.strides, b.strides, c.strides
    used = lib.op_gemm_bf16(
        nbatch, m, n, k,
        _data(ffi, a), a_off, sa[-2] // ia, sa[-1] // ia,
        _data(ffi, b), b_off, sb[-2] // ib, sb[-1] // ib,
        _data(ffi, c, "char"), c_off, sc[-2] // ic, sc[-1] // ic,
        1 if c.dtype == BF16 else 0, _blocking(ffi, brow := _blocking_row(op, level, row, m)), epi,
        _threads.get_num_threads())
    # "widen_f32": avx512_core's kernel ran (the coverage report credits it, not VDPBF16PS's)
    _stats.record(op, "bfloat16", brow.level if brow is not row else level,
                  row.algorithm if row is not None else None)
    if callable(shapes) and (used < 0 or verbose):
        shapes = shapes()
    b_form = 1 if sb[-2] == ib and sb[-1] >= k * ib else 0  # B = W^T: small M may take its own form
    _check(used, lambda: ffi.string(lib.op_gemm_bf16_kernel_for(m, k, b_form)).decode(), shapes or (m, n, k))
    if verbose:
        name = ffi.string(lib.op_gemm_bf16_kernel_for(m, k, b_form)).decode()
        _verbose.emit(op, f"bf16:bf16:{_TAG[c.dtype]}", level, name, shapes, used, time.perf_counter() - t0)
    return level


def pack_weight(level: str, b_dtype: np.dtype, wt: np.ndarray) -> tuple[np.ndarray, int]:
    """Pack B = wt (K x N view, dtype float32 or bfloat16) for ``level``'s kernel. Returns the
    packed buffer (uint8, 64-byte aligned) and its size."""
    mod = load(level)
    ffi, lib = mod.ffi, mod.lib
    code = 1 if b_dtype == BF16 else 0
    k, n = wt.shape
    size = int(lib.op_pack_b_bytes(code, k, n))
    buf = empty_aligned(size, np.uint8)
    item = wt.itemsize
    lib.op_pack_b(code, k, n, ffi.cast("const void *", wt.ctypes.data), wt.strides[0] // item,
                  wt.strides[1] // item, ffi.cast("void *", buf.ctypes.data), _threads.get_num_threads())
    return buf, size


def run_gemm_packed(op: str, level: str, row, b_dtype: np.dtype, a: np.ndarray, packed: np.ndarray,
                    n: int, c: np.ndarray, *, bias=None, activation=None, shapes: str = "") -> None:
    """C[M, N] = A[M, K] @ Bpacked (+ bias over columns, activation); A has the packed dtype."""
    mod = _module(level)
    ffi, lib = mod.ffi, mod.lib
    m, k = a.shape
    ia, ic = a.itemsize, c.itemsize
    code = 1 if b_dtype == BF16 else 0
    epi, _keep = _epilogue(ffi, bias, 1, activation)
    brow = _blocking_row(op, level, row, m) if code else row
    blk = _blocking(ffi, brow)
    if m <= 16 and blk != ffi.NULL and blk.kc < k:
        # decode: each weight panel streamed once, front to back (a copy: the row's struct is shared)
        blk = ffi.new("op_blocking *", {"mc": row.mc, "kc": k, "nc": row.nc})
    verbose = _verbose.enabled()
    t0 = time.perf_counter() if verbose else 0.0
    used = lib.op_gemm_packed(
        code, 1, m, n, k, ffi.cast("const void *", a.ctypes.data), ffi.NULL,
        a.strides[0] // ia, a.strides[1] // ia, ffi.cast("const void *", packed.ctypes.data),
        ffi.cast("void *", c.ctypes.data), ffi.NULL, c.strides[0] // ic, c.strides[1] // ic,
        1 if c.dtype == BF16 else 0, blk, epi, _threads.get_num_threads())
    dname = "bfloat16" if code else "float32"
    name = lambda: (ffi.string(lib.op_gemm_bf16_kernel_for(m, k, 2)).decode() if code  # noqa: E731
                    else ffi.string(lib.op_gemm_f32_kernel_name()).decode())
    _stats.record(op, dname, brow.level if brow is not row else level,
                  row.algorithm if row is not None else None)
    _check(used, name, shapes or (m, n, k))
    if verbose:
        name = name()
        _verbose.emit(op, f"{_TAG[a.dtype]}:packed:{_TAG[c.dtype]}", level, name + ",prepacked", shapes,
                      used, time.perf_counter() - t0)
