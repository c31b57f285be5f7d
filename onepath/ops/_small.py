"""The small-problem path of ``matmul`` and ``linear`` (kernels/gemm_small.c, api_small.h).

Products too small to pay for packing and scratch buffers run the registry's ``algorithm="small"``
row of their (op, float32), reading A and B in place: on the calling thread, or, from
MT_MIN_FLOPS / MT_MIN_FLOPS_NN on, on the thread pool with C's columns split (its rows for the nn
and nt forms with 32 columns or fewer; ``mt_threads``; the same bits at any thread count). With
more than one thread, thin products take it above the limits too (``thin``). ``MT_ON = False``
turns both off (one thread, the former thin paths).

Where a call's fixed cost goes (4 x 4 x 4 float32 matmul, Zen 4, 1 thread, perf_counter over
500 x 200-call blocks, best block; numpy.matmul itself takes 0.95 us): the previous front end took
7.2 us, mostly ``select`` (0.35 us, of which ``isa()`` 0.22), ``kernel_ready`` / ``may_share_memory``
checks, typed ``from_buffer`` (~0.5 us each), the batch logic and the packed-GEMM driver's set-up in
C. Now: argument checks 0.15 us (exact type and dtype identity, one shape unpack that raises for
other ranks), the row lookup 0.06 us (``fast_matmul``, keyed by the scoped cap, holds the C entry
while ONEPATH_VERBOSE is off, so the verbose test costs nothing), ``np.empty`` 0.14 us, three
untyped ``ffi.from_buffer`` 0.43 us (the C entry takes ``void *``; ``arr.ctypes.data`` would cost
~1 us each; a non-contiguous operand makes from_buffer raise and takes the general path), the C
call 0.23 us (0.12 us of it is any cffi call: argument conversion and the GIL release): 1.35 us in
all. The C-contiguous entry (``op_gemm_f32_small_cc``) has six arguments and checks alignment.
Since 2026-12-07 the tiniest products (within LIMITS' first value; since 2026-12-08 at any thread
count, transposed and 3-D operands too) skip that Python and the three conversions:
``Bound.pyfast``, one CPython function per level module (kernels/pyfast.inc) that checks the
operands through the buffer protocol and makes the same kernel call (Zen 3 VM, 1 thread: 4^3 2.3 -> 1.2 us, numpy 1.7; 16^3 1.3 us, numpy 2.3), also
for a vector operand (a K 4096 dot product 4.2 -> 1.7 us, numpy 1.7; 64 x 64 by a vector 1.2 us,
numpy 2.7).

``LIMITS``: per level of the small row, the largest M*N*K this path runs whatever the thread count,
and the largest when the packed GEMM would use one thread only: one thread allowed, or (``mt_fits``)
M*N*K below MT_GEMM_ONE (``use_small``), for products with a row count (``fits``). Measured on Zen 4
with one thread (best of alternated runs, the packed GEMM of main as of 2026-11-30): AVX-512, the
small kernel takes 38.6 / 134 / 313 us at 128^3 / 192^3 / 256^3 where the packed GEMM takes 47.0 /
143 / 327 (numpy 43.5 / 139 / 325), and with 2 threads the packed GEMM wins from about 192^3 on (118
us against 141); AVX2 (6 x 16), the small kernel wins up to 96^3 (22.9 against 26.9 us) and loses at
128^3 (54.5 against 52.4); portable C, it wins up to 32^3 (7.1 against 11.0 us) and ties at 48^3.

``B_MAX``: the small kernel reads B in place, a strip of columns at a time, so a product whose B is
far larger than L2 (K x N float32 elements above ``B_MAX``, 512 KiB; the thin decode shapes such as
1 x 4096 x 4096, within the one-thread limit by M*N*K) takes the paths that stream B once instead
(``gemv_f32.c``: the dot-product and row-stream paths). 256^3's B is 256 KiB.
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import time
from collections.abc import Callable
from functools import lru_cache

from .. import _repro_mode, _stats, _threads, _verbose
from ..dispatch import cap as _cap
from ..dispatch import registry
from ..dispatch.levels import level_index
from ..kernels import load

import numpy as _np

_ND = _np.ndarray
_F32 = _np.dtype(_np.float32)
_empty = _np.empty

B_MAX = 1 << 17  # K * N elements (512 KiB of float32): see the module docstring
# linear on a PackedWeight: up to this many rows the nt form on the raw weight, above it the nn form
# on its transposed copy (PackedWeight.small_b). sapphirerapids, 2 threads set (the small kernel
# runs on one), nn / nt speed over K x N 384 x 384, 384 x 1536, 1536 x 384, 128 x 128: M = 1
# 0.75-0.91, 2-3 0.66-1.23, 4 0.85-1.28, 6 1.07-1.51, 8 1.17-1.75 (best of 7 alternated blocks).
NT_MAX_M = 4
# Threads (op_gemm_f32_small_mt: C's columns split, or its rows, the same bits as one thread). The
# small kernel runs on the calling thread up to these FLOPs (2 M N K), on every thread allowed above
# them; the pool's hand-off costs ~2 us. sapphirerapids, 2 threads, one thread / two threads: nt
# form 32^3 0.86, 1 x 256 x 256 1.37, 48^3 1.31, 64^3 1.50, 128^3 2.06; nn form 8 x 128 x 128 0.81,
# 64^3 0.55, 80^3 0.93, 96^3 1.02, 128^3 1.43, 16 x 256 x 256 1.58, 1 x 256 x 256 1.43 (best of 7
# alternated).
# MT_ON: the threaded small kernel and the thin rule (after changing it: matmul.set_mt_limits()).
# Off for a day (2026-12-05): right after numpy's OpenBLAS ran, its threads spin ~0.1 s and the
# pool's worker got no core for a scheduler slice, while the caller waited for it (linear 4 x 768 x
# 384 at 2 threads ~4 ms instead of 25 us). The pool no longer waits for a worker that has not
# started (kernels/threads.c): 200 such calls right after numpy 106 ms -> 7.2 ms; and for 0.1 s
# after two calls in a row found a worker without a CPU the small kernel runs on the calling thread
# (there it measured 56 us at the median against one thread's 32 with torch's threads spinning).
# Steady back-to-back calls: 31 -> 21 us.
MT_ON = True
MT_MIN_FLOPS = 1e5        # nt form, strided operands, and the nn form with fewer than 8 rows
MT_MIN_FLOPS_NN = 1.5e6   # nn form from 8 rows (an 8 x 32 tile per step: 2-3x the nt form's rate)
# Thin products on more than one thread also take the small kernel above LIMITS (threaded): up to
# THIN_M rows with K N <= THIN_KN, up to 4 rows with K N <= THIN4_KN (float32, AVX-512). The paths
# they took before ran one thread below OP_GEMM_MIN_FLOPS_PER_THREAD (4 MFLOP) or packed B per
# call: sapphirerapids, 2 threads, GFLOP/s before -> after, x @ W.T: 1 x 1024 x 1024 16 -> 52,
# 1 x 768 x 3072 13 -> 29, 4 x 768 x 768 51 -> 208, 16 x 384 x 384 71 -> 189, 16 x 768 x 768
# 148 -> 170; x @ W (row-major W): 1 x 768 x 768 18 -> 48, 8 x 1536 x 384 102 -> 232. From 16 rows
# with K N above 2^20 the packed GEMM was faster (16 x 768 x 3072: 148 against 115), and at
# K = N = 4096 (2^24) the dot-product path (gemv_f32.c) ties and keeps its per-uarch options. A
# PackedWeight's packed panels beat the small kernel from 5 rows on (8 x 1024 x 1024: 175 against
# 104 GFLOP/s; MiniLM's 12-row batches): linear passes its rows only up to NT_MAX_M.
THIN_M, THIN_KN, THIN4_KN = 16, 1 << 20, 1 << 22
# The nn form (x @ W with a row-major W; a transposed W is the nt form above) only up to
# THIN_NN_KN: sapphirerapids, 2026-12-05, 2 threads, small kernel / GEMM time (best of 2 x 5
# alternated blocks): 8 x 1536 x 384 0.61, 12 x 768 x 768 0.83, 16 x 768 x 768 0.69, 16 x 512 x
# 1536 1.10, 1 x 1024 x 1024 1.07, 4 x 1024 x 1024 1.20, 16 x 1024 x 1024 1.65, 2 x 1536 x 1536
# 1.16, 4 x 2048 x 2048 1.63.
THIN_NN_KN = 5 << 17
# Past LIMITS' first value, more than one thread allowed (``mt_fits``): LIMITS was measured before
# the small kernel had threads, when the packed GEMM on two threads won from ~192^3 against the
# small kernel on one. But the packed GEMM takes a second thread only from 8 MFLOP (twice
# OP_GEMM_MIN_FLOPS_PER_THREAD, kernels/gemm_f32.c): between 128^3 and M N K = 4e6 it ran one thread
# where the small kernel now runs two. sapphirerapids, 2026-12-06, 2 threads, median of 5 alternated
# blocks in one process, x numpy (OpenBLAS), packed GEMM -> small kernel: matmul 128 x 384 x 64
# 0.59-0.61 -> 1.17-1.18, 100 x 200 x 150 0.71 -> 1.20, 64 x 512 x 96 0.87 -> 1.54, 1024 x 48 x 64
# 0.52 -> 1.18, 512 x 64 x 96 0.54 -> 0.78, 300 x 100 x 100 0.51 -> 0.92, 256 x 384 x 32 0.49-0.54
# -> 0.83-0.85 (1.22 with the row ranges of op_gemm_f32_small_mt); linear (x @ W.T) 128 x 384 x 64
# 0.66 -> 1.41-1.44. Above 4e6 (the GEMM on two threads) it was mixed: 128 x 384 x 128 1.13-1.26 ->
# 1.42-1.52, 128 x 512 x 128 1.14-1.18 -> 1.27-1.32, but 256^3 1.20-1.23 -> 1.05-1.07 in two runs
# (1.11-1.15 -> 1.17 in two others), 128 x 768 x 96 1.04-1.05 -> 0.89-0.92 (96 columns in ranges of
# 64 and 32), 1024 x 128 x 128 0.94-0.98 -> 0.85-0.89: those keep the GEMM. Not measured on Zen 4
# (the GEMM's one-thread rule is the same there). Batched products keep LIMITS (use_small_batched:
# whole entries per thread). Where the small kernel cannot split C and runs one thread as the GEMM
# did (found by the review): linear 3000 x 40 x 30 0.58 -> 0.92 (since 2026-12-07 its rows split:
# gemm_small.c), matmul 63 x 1100 x 32 0.64 -> 1.09, 20000 x 128 x 1 0.44 -> 0.50 (its rows split).
MT_GEMM_ONE = 4_000_000   # M*N*K below which the packed GEMM runs one thread


def mt_threads(m: int, mnk: int, nn: bool) -> int:
    """Threads for a small-kernel product of M = ``m`` rows and M*N*K = ``mnk`` (``nn``: the nn
    form, B and C rows contiguous): every thread allowed (``onepath.set_num_threads``) above
    MT_MIN_FLOPS / MT_MIN_FLOPS_NN, else 1."""
    t = _threads.get_num_threads()
    if t <= 1 or not MT_ON:
        return 1
    return t if 2 * mnk >= (MT_MIN_FLOPS_NN if nn and m >= 8 else MT_MIN_FLOPS) else 1


def thin_rows(m: int, packed) -> int | None:
    """``use_small``'s ``m`` for a linear of ``m`` rows: None (no thin rule) for a PackedWeight
    ``packed`` and more than NT_MAX_M rows, whose packed panels beat the small kernel there."""
    return m if packed is None or m <= NT_MAX_M else None


def thin(m: int, kn: int, level: str, nn: bool = False) -> bool:
    """True when a float32 product of ``m`` rows and B of ``kn`` = K*N elements takes the small
    kernel on several threads whatever its M*N*K (THIN_M, THIN_KN, THIN4_KN; ``nn``, B row-major:
    THIN_NN_KN too; AVX-512's small row, more than one thread allowed, the small path not off: by
    ``off()`` or by LIMITS below 0, as the tests' packed-GEMM mode sets them)."""
    return (MT_ON and level == "avx512_core"
            and (m <= THIN_M and kn <= THIN_KN or m <= 4 and kn <= THIN4_KN)
            and (not nn or kn <= THIN_NN_KN)
            and _threads.get_num_threads() > 1 and LIMITS.get(level, (-1, -1))[0] >= 0
            and not _off.get())
LIMITS: dict = {"avx512_core": (128 ** 3, 256 ** 3), "avx2": (112 ** 3, 112 ** 3),
                 "generic": (40 ** 3, 40 ** 3)}
# Per (uarch, level of the small row), where LIMITS measured otherwise (``limits``: looked up at the
# first use, as NT_DOTS_LIMITS; LIMITS switched off below 0 stays off). zen3
# (AMD EPYC Zen 3 VM, family 25 model 1, AVX2 only, 2026-12-06, the two limits alternated in one
# process beside numpy's OpenBLAS, median of 9, small kernel / GEMM speed): 1 thread 128^3 1.13,
# 160^3 1.13, 192^3 0.94 (x numpy 0.76 -> 0.85, 0.81 -> 0.92); 2 threads 128^3 1.80, 144^3 1.77
# (x numpy 0.55 -> 0.98, 0.63 -> 1.11: the GEMM ran them on one thread, the small kernel on two).
# On Zen 4 at avx2 128^3 lost at 1 thread (module docstring): the row is zen3's only. 158^3, not
# 160^3: within MT_GEMM_ONE, so that 2 threads take the small kernel wherever 1 thread does (with
# 160^3 a product of M*N*K 4e6 .. 4.096e6 ran the small kernel at 1 thread and the GEMM at 2, other
# bits: found by the fresh-user review).
LIMITS_UARCH: dict = {("zen3", "avx2"): (112 ** 3, 158 ** 3)}
_uarch_limits: dict = {}  # level of the small row -> LIMITS_UARCH's value on this host, or None
# bfloat16 matmul (``matmul_bf16``): the small kernel (the avx512_core row, bfloat16 widened into
# float32 FMAs, ~90 GFLOP/s at 256^3 on one core) against the bfloat16 GEMM of the level in force
# (AMX tiles, VDPBF16PS, or the widening packed GEMM), which LIMITS, measured for float32, did not
# weigh. Per level in force: (largest M*N*K, rows from which that limit applies); fewer rows keep
# LIMITS (the GEMM's 32-row tiles then run mostly empty). sapphirerapids (the Intel AMX VM,
# 2026-12-05, small kernel / GEMM time, best of 3 x 5 blocks alternated in one process, 1 thread):
# at avx512_core_amx 64^3 0.93, 80^3 0.94, 88^3 1.17, 96^3 2.0, 128^3 3.8 (2 threads alike),
# 256^3 9.6; 8 x 256 x 256 0.68, 12 x 256 x 256 0.84, 16 x 256 x 256 1.65, 16 x 128 x 128 0.85,
# 32 x 128 x 128 1.46, 128 x 64 x 64 1.54; capped at avx512_core_bf16 88^3 0.90, 96^3 0.98, 128^3
# 1.30, 256^3 1.79, 24 x 256 x 256 0.95, 32 x 256 x 256 1.01, 64 x 64 x 256 1.18; capped at
# avx512_core 96^3 1.01, 128^3 1.26, 32 x 256 x 256 1.22, 8 x 256 x 256 0.71. Zen 4 (no AMX):
# unmeasured; its VDPBF16PS GEMM ran 2x this kernel's rate at 512^3 and above. avx2 (zen3, AMD EPYC
# Zen 3 VM, 2026-12-07, GEMM time / small kernel time (> 1: the small kernel is faster), best of 7
# alternated in one process, 1 / 2 threads; other CPUs at avx2 not measured): 16^3 3.7 / 2.8, 48^3
# 1.13 / 1.18, 56^3 0.94 / 1.22, 64^3 0.88 / 0.87, 128^3 0.38 / 0.39 (335 against 127 us: 128^3 had
# taken 2.6x as long as 160^3), 64 x 48 x 64 0.79 / 0.86; thin ones too: 1 x 512 x 256 1.36 / 1.37,
# 8 x 128 x 128 1.16 / 1.63, 16 x 96 x 96 0.96 / 0.98, 8 x 256 x 256 0.74 / 0.76, 1 x 1024 x 1024
# 0.70 / 0.62: past 56^3 the GEMM at any row count.
BF16_LIMITS: dict = {"avx512_core_amx": (80 ** 3, 16), "avx512_core_bf16": (96 ** 3, 32),
                     "avx512_core": (96 ** 3, 32), "avx2": (56 ** 3, 1)}


# One-row float32 products with a row-major B (x @ W, vector @ matrix; a 2-D product or a batch of
# one), per (uarch, level of the small row): (K*N, N, K) from all of which on the packed GEMM's row
# stream (gemv_f32.c, which takes N >= 128) runs them instead of the small kernel, which sweeps B in
# column strips of its tile, each strip down every row: with one row its FMAs wait on B. zen3 (AMD
# EPYC Zen 3 VM, avx2, 2026-12-07, row stream time / small kernel time (> 1: the small kernel is
# faster), best of 7 alternated in one process, 1 thread; the row stream's time includes the general
# path's ~12 us of Python; K x N): 256^2 2.79, 384^2 1.55, 448^2 1.47, 512 x 384 1.49; from 2^18:
# 512^2 0.92-1.10, 1024 x 256 1.04, 640^2 1.06, 768^2 0.80, 1024^2 0.35, 256 x 1024 0.48, 384 x 1536
# 0.58, 2048 x 256 0.78, 256 x 2048 0.76, 1536 x 384 0.46; 2 threads 384^2 2.06, 512^2 1.33, 768^2
# 0.99, 1024^2 0.95, 1536 x 384 0.83. Two rows keep the small kernel (2 x 512^2 1.34, 2 x 768^2
# 0.93); so do depths below 32 (the review, 1 thread, row stream / small kernel time: 1 x 262144
# 4.2, 2 x 131072 3.5, 8 x 32768 2.5, 16 x 16384 0.79-1.6, 32 x 8192 0.64-1.0, 64 x 4096 0.28) and
# batches of two or more entries, whose row stream would not split K as the 2-D product's does
# (their entries' bits then are the small kernel's, also in onepath.dask's blocks). Other hosts:
# LIMITS alone (not measured).
ROW_LIMITS: dict = {("zen3", "avx2"): (1 << 18, 128, 32)}
_row_limits: dict = {}  # level of the small row -> ROW_LIMITS' value on this host, or None


def row_limits(level: str) -> tuple[int, int, int] | None:
    """ROW_LIMITS' (K*N, N, K) for the small row of ``level`` on this host (looked up at the first
    use, as ``limits``), or None."""
    try:
        return _row_limits[level]
    except KeyError:
        from ..dispatch.cpu import probe
        row = _row_limits[level] = ROW_LIMITS.get((probe().uarch, level))
        return row


# Products with a narrow row-major B (A @ W, W (K, N) with 5 <= N <= NARROW_NN's first value,
# K*N within B_MAX, K within NT_NN's depth, at least its second value of rows; matmul's nn form,
# 2-D), per (uarch, level of the small row): the small kernel at any M*N*K, its rows split over
# the threads, instead of the packed GEMM, which packs all of A for tiles of 16 columns (6 x 16 at
# avx2) that then run mostly empty. (2-4 columns: the small kernel's and the driver's narrow copies; gemm_small.c, gemv_f32.c.)
# zen3 (AMD EPYC Zen 3 VM, avx2, 2026-12-07, x numpy's OpenBLAS for the packed GEMM -> the small
# kernel, best of 11 alternated in one process; 2 threads settle 0.12 s): 1 thread 4096 x 512 x 5
# 0.71 -> 1.21, x 8 0.57-0.68 -> 1.41-1.46, x 12 0.85 -> 1.47, x 16 0.99-1.04 -> 1.60-1.70, 1024 x
# 2048 x 8 0.53 -> 1.24, x 16 1.02 -> 1.52, 8192 x 128 x 12 0.53 -> 1.04, 300 x 4000 x 8 0.52 ->
# 1.51, 2048^2 x 8 0.66 -> 1.46; 2 threads 4096 x 512 x 8 0.53-0.63 -> 0.90-1.19, x 12 0.67 ->
# 1.30, x 16 0.78-0.93 -> 0.81-1.68, 1024 x 2048 x 8 0.54 -> 0.88, 4096^2 x 8 0.70 -> 1.35, 300 x
# 4000 x 8 0.34 -> 0.87. From 20 columns even or mixed (4096 x 512 x 24 1 thread 0.77 -> 1.36, 2
# threads 0.49 -> 0.53; x 32 1.03 -> 1.10, 0.69 -> 0.67). The nt form alike (linear's x @ W.T,
# W (N, K) row-major, matmul's B = W.T) where the small kernel takes it as the transposed nn form
# (NT_NN: from its rows, up to its depth), not as dot products: linear 1 thread 4096 x 512 -> 8 0.50
# -> 1.34, -> 16 1.01 -> 1.51, 1024 x 2048 -> 10 0.64 -> 1.04, 300 x 4000 -> 8 0.48 -> 1.41, 4096^2
# -> 5 0.89 -> 2.09; 2 threads 0.50 -> 0.71, 0.60 -> 0.93, 0.48 -> 0.71, 0.51 -> 0.87, 0.75 -> 1.06
# (x numpy's a @ W.T; at 2 threads this VM's timings moved up to 2x between runs); below 8 columns
# the avx2 kernel takes dot products there (gemm_small.c), measured too: 1 thread 4096 x 512 -> 5
# 0.69 -> 2.03, -> 7 0.87 -> 1.74, 16384 x 64 -> 6 0.53 -> 1.29, 2048 x 128 -> 7 0.68 -> 1.46. Batched
# products and a PackedWeight past NT_MAX_M rows keep LIMITS (as the thin rule). Other hosts: not
# measured (no row: the packed GEMM, as before).
NARROW_NN: dict = {("zen3", "avx2"): (16, 64)}
_narrow_nn: dict = {}  # level of the small row -> NARROW_NN's value on this host, or None


def narrow_nn(m: int, n: int, kn: int, level: str) -> bool:
    """Whether a 2-D float32 product of ``m`` rows and a B of ``n`` columns and K*N = ``kn``
    elements (the nn form or the nt form's transposed nn form: ``use_small`` checks the form) takes
    the small kernel of ``level`` on this host whatever its M*N*K (``NARROW_NN``; not with the small
    path off, by ``off()`` or by LIMITS below 0)."""
    try:
        lim = _narrow_nn[level]
    except KeyError:
        from ..dispatch.cpu import probe
        lim = _narrow_nn[level] = NARROW_NN.get((probe().uarch, level))
    # K within NT_NN's depth in either form: onepath.dask decides for its blocks without knowing
    # whether B is W.T in memory (nt: past that depth the kernel takes dot products, and the rule
    # says no), so the nn form answers alike (found by the review: x @ W.T at K 8192)
    return (lim is not None and 5 <= n <= lim[0] and m >= lim[1] and kn <= B_MAX
            and not nt_dots(m, kn // n, level) and limits(level)[0] >= 0 and not _off.get())


def row_fits(kn: int, n: int, level: str) -> bool:
    """Whether a one-row float32 product with a row-major B of K*N = ``kn`` elements and ``n``
    columns takes the small kernel of ``level`` on this host (``ROW_LIMITS``)."""
    lim = row_limits(level)
    return lim is None or kn < lim[0] or n < lim[1] or kn < lim[2] * n


# float32's nt form (linear's x @ W.T, matmul's B = W.T). From NT_NN[level][0] rows with K up to
# NT_NN[level][1] the small kernel of that level (its small row's) runs it as the nn form on B
# transposed in strips (gemm_small.c's op_small_nt_nn, whose constants these mirror;
# op_gemm_f32_small_nt_nn answers the same); with fewer rows or a deeper K it takes dot products,
# which trail the packed GEMM on larger products: NT_DOTS_LIMITS, per (uarch, level of the small
# row), holds the largest M*N*K of that form at one thread (more threads: LIMITS and the thin rule
# alone). sapphirerapids (the Intel AMX VM, 2026-12-05, linear, 1 thread, small kernel / GEMM time,
# best of 3 x 5 blocks alternated in one process): dot products 1 x 768 x 768 0.80, 8 x 512 x 512
# 0.79, 12 x 384 x 384 0.80, 4 x 768 x 768 1.01, 12 x 384 x 1536 1.00, 32 x 768 x 256 1.12, 64 x
# 1024 x 128 1.07, 16 x 1024 x 1024 1.39; the transposed nn form 128^3 0.73, 256^3 0.97, 16 x 256 x
# 256 0.61, 64 x 64 x 256 0.66 (2 threads 0.37-0.92). zen4: unmeasured (no row: LIMITS alone, as
# before). avx2 (zen3, AMD EPYC Zen 3 VM, 2026-12-06, 1 thread, the kernel alone alternated in one
# process with numpy, x numpy dot products -> transposed nn form): 64^3 0.51 -> 0.69, 128^3 0.61 ->
# 0.94, 256^3 0.81 -> 1.05, 16 x 256 x 256 0.81 -> 1.00, 12 x 384 x 384 0.81 -> 1.13, 12 x 1536 x
# 384 0.93 -> 1.09, 128 x 1536 x 384 0.59 -> 0.93, 64 x 2048 x 64 0.57 -> 0.94; 8 rows even (8 x
# 256 x 256 0.98 / 0.96, 8 x 768 x 768 1.18 / 1.25), 4 rows and fewer lost (4 x 256 x 256 1.27 ->
# 1.10, 1 x 256 x 256 0.40 -> 0.28). Levels without a row take dot products. At avx2 the kernel
# also keeps the dot products below 8 columns (gemm_small.c; not mirrored here: no NT_DOTS_LIMITS
# row at avx2 reads it).
NT_NN: dict = {"avx512_core": (16, 512), "avx2": (12, 4096)}
NT_K_DOTS = 1 << 62  # an nt_k (use_small) past every NT_NN depth: dot products (C's rows strided)
# Neither the nn nor the nt form (A and B both column-major, C's rows strided, ...): the small
# kernel's scalar reference loop (op_small_any), which the packed GEMM beats from about 16^3
# (sapphirerapids, 2026-12-05, 1 thread, under load: 8^3 12 against 28 us, 16^3 27 against 16,
# 128^3 1312 against 53, 256^3 15.5 ms against 0.4): matmul takes it only up to this M*N*K.
ANY_MAX = 12 ** 3
NT_DOTS_LIMITS: dict = {("sapphirerapids", "avx512_core"): 160 ** 3}
_nt_limits: dict = {}  # level of the small row -> NT_DOTS_LIMITS' value on this host, or None


def nt_dots(m: int, k: int, level: str) -> bool:
    """True when the small kernel of ``level`` (its small row's) takes dot products for an nt-form
    product of ``m`` rows and depth ``k`` (NT_NN: from its rows, up to its depth, the transposed nn
    form; a level without a row, dot products)."""
    lim = NT_NN.get(level)
    return lim is None or m < lim[0] or k > lim[1]


_off: contextvars.ContextVar[bool] = contextvars.ContextVar("onepath_small_off", default=False)


_on: contextvars.ContextVar[bool] = contextvars.ContextVar("onepath_small_on", default=False)


@contextlib.contextmanager
def on():
    """In this block (this thread / asyncio task) every product ``use_small`` is asked about takes
    the small path: ``onepath.dask`` runs a block of a whole problem that takes the small kernel
    so, whatever the worker's thread count (the small kernel's bits do not depend on it), and the
    block rounds bit for bit as the in-memory call."""
    token = _on.set(True)
    try:
        yield
    finally:
        _on.reset(token)


@contextlib.contextmanager
def off():
    """In this block (this thread / asyncio task) no call takes the small path: every product runs
    the packed GEMM, as a larger product does. ``onepath.dask`` runs a block cut from a large problem
    so, and the block then rounds bit for bit as the in-memory call on the whole problem does."""
    token = _off.set(True)
    try:
        yield
    finally:
        _off.reset(token)


def limits(row_level: str) -> tuple[int, int]:
    """LIMITS' (any threads, one thread) M*N*K limits of the small row of ``row_level`` on this
    host: LIMITS_UARCH's row for this host's microarchitecture where it has one, unless LIMITS
    switches the level off (below 0: the tests' packed-GEMM mode)."""
    lim = LIMITS.get(row_level, (-1, -1))
    if lim[0] < 0:
        return lim
    try:
        row = _uarch_limits[row_level]
    except KeyError:
        from ..dispatch.cpu import probe
        row = _uarch_limits[row_level] = LIMITS_UARCH.get((probe().uarch, row_level))
    return lim if row is None else row


def fits(mnk: int, row_level: str, kn: int = 0, m: int | None = None) -> bool:
    """True when M*N*K = ``mnk`` (B of ``kn`` = K*N elements, ``m`` rows: None counts as many) is
    small enough for the small row of level ``row_level`` (and the small path is not switched off
    by ``off()``): within LIMITS' first value, or, given ``m``, its second with B within B_MAX at
    one thread or (the threaded small kernel on) where ``mt_fits``. Without ``m`` (batched
    products, a PackedWeight's linear past NT_MAX_M rows) the first value alone, at any thread
    count: they took the small kernel at one thread and the packed GEMM at two, other bits (found
    by the fresh-user review)."""
    lim, lim1t = limits(row_level)
    return ((mnk <= lim or (mnk <= lim1t and kn <= B_MAX and m is not None
                            and (_threads.get_num_threads() == 1 or mt_fits(mnk, m))))
            and not _off.get())


def mt_fits(mnk: int, m: int | None) -> bool:
    """Whether a product past LIMITS' first value (and within its second, B within B_MAX) takes
    the small kernel when more than one thread is allowed: below MT_GEMM_ONE, where the packed
    GEMM would run on one thread, so that LIMITS' one-thread value decides as at one thread; the
    small kernel then runs on the pool where it can split C (``mt_threads``; a few columns and
    rows, or the nn / nt form's 32 columns or fewer with fewer than 8 tiles of rows: one thread,
    as the GEMM). ``m`` None (no row
    count given: a linear on a PackedWeight past NT_MAX_M rows): no. (Batched products keep
    LIMITS' first value: ``use_small_batched`` asks ``fits`` without ``m``.)"""
    return MT_ON and m is not None and mnk < MT_GEMM_ONE


def nt_dots_limit(level: str) -> int | None:
    """This host's NT_DOTS_LIMITS value for ``level`` (None: no row)."""
    try:
        return _nt_limits[level]
    except KeyError:
        from ..dispatch.cpu import probe
        lim = _nt_limits[level] = NT_DOTS_LIMITS.get((probe().uarch, level))
        return lim


def _nt_fits(mnk: int, level: str) -> bool:
    """False when an nt-form product taking dot products (M*N*K = ``mnk``) is past this host's
    NT_DOTS_LIMITS for ``level`` at one thread."""
    lim = nt_dots_limit(level)
    return lim is None or mnk <= lim or _threads.get_num_threads() != 1


def use_small(mnk: int, op: str = "matmul", dtype: str = "float32", kn: int = 0,
              m: int | None = None, nt_k: int | None = None, n: int | None = None) -> bool:
    """True when a product of M*N*K = ``mnk`` of (op, dtype) takes the small path at the level in
    force (given ``m``, its rows, also a thin float32 product: ``thin``; a bfloat16 one within
    ``BF16_LIMITS`` of that level: ``m`` None counts as many rows; ``nt_k``, the depth K of a
    float32 nt-form product (B = W.T), within ``NT_DOTS_LIMITS`` where the small kernel would take
    it as dot products: ``nt_dots``; given ``n``, B's columns, a one-row float32 product with a
    row-major B within ``ROW_LIMITS``, and a float32 product with a narrow B at any size, in the
    nn form or the nt form's transposed nn form: ``narrow_nn``)."""
    isa = _cap.isa()
    level = row_for(op, isa, dtype).level
    if _on.get():
        return True
    if (m == 1 and n is not None and nt_k is None and dtype == "float32"
            and not row_fits(kn, n, level)):
        return False
    if dtype == "bfloat16":
        lim = BF16_LIMITS.get(isa)
        if lim is not None and mnk > lim[0] and (m is None or m >= lim[1]):
            return False
    nt_ok = nt_k is None or not nt_dots(m or 1 << 62, nt_k, level) or _nt_fits(mnk, level)
    return ((fits(mnk, level, kn, m) and nt_ok)
            or (m is not None and dtype == "float32" and thin(m, kn, level, nt_k is None))
            or (dtype == "float32" and m is not None and n is not None
                and (nt_k is None or not nt_dots(m, nt_k, level)) and narrow_nn(m, n, kn, level)))


def use_small_batched(mnk: int, kn: int, m: int, nt_k: int | None = None,
                      n: int | None = None) -> bool:
    """``use_small`` for a batched float32 matmul whose core products are M*N*K = ``mnk`` (``m``
    rows, K*N = ``kn``, ``nt_k`` and ``n`` as there; ``n`` only for a batch of one entry:
    ``ROW_LIMITS``): within LIMITS (or ``on()``), never by the thin rule alone (the batched entry
    splits whole entries over the threads, not a thin product's columns: measured 1.1-1.5x slower
    than the GEMM for 2-4 thin entries at 2 threads)."""
    if not use_small(mnk, "matmul", "float32", kn, m, nt_k, n):
        return False
    return _on.get() or fits(mnk, row_for("matmul", _cap.isa()).level, kn)


def reset() -> None:
    """Forget the bound rows and fast entries (after a change of ``LIMITS``; tests)."""
    fast_matmul.clear()
    fast_linear.clear()
    for cache in _bound.values():
        cache.clear()
    _bound_bf16.clear()
    _nt_limits.clear()
    _uarch_limits.clear()
    _row_limits.clear()
    _narrow_nn.clear()


class Bound:
    """A small-path registry row with its module's C functions (``fn`` any strides, ``cc`` the
    C-contiguous entry, ``mt`` threaded, ``batch`` a batch of products) and its cffi instance."""
    __slots__ = ("row", "ffi", "fn", "cc", "mt", "batch", "fb", "null", "pyfast_new",
                 "pyfast_linear_new")

    def __init__(self, row):
        mod = load(row.level)
        self.row = row
        self.ffi = mod.ffi
        self.fn = mod.lib.op_gemm_f32_small
        self.cc = mod.lib.op_gemm_f32_small_cc
        self.mt = mod.lib.op_gemm_f32_small_mt
        self.batch = mod.lib.op_gemm_f32_small_batch
        self.fb = mod.ffi.from_buffer
        self.null = mod.ffi.NULL
        self.pyfast_new = getattr(mod.lib, "op_pyfast_matmul_new", None)
        self.pyfast_linear_new = getattr(mod.lib, "op_pyfast_linear_new", None)

    def pyfast(self, lim: int, row: tuple) -> Callable:
        """kernels/pyfast.inc's matmul function f(a, b) -> the product or None for this row's
        module, made for LIMITS' first value ``lim``, ``mt_limits()``, ``row`` (ROW_LIMITS' K*N,
        N, K) and this host's nt-form limits (``_nt_cfg``: B = W.T), or a function that always
        answers None where the module has none."""
        return self._made(self.pyfast_new, (lim, *mt_limits(), *row, *self._nt_cfg()))

    def pyfast_linear(self, lim: int) -> Callable:
        """kernels/pyfast.inc's linear function f(x, w, bias, act) -> y or None for this row's
        module, made as ``pyfast``'s (no ROW_LIMITS: they do not apply to the nt form), or a
        function that always answers None."""
        return self._made(self.pyfast_linear_new,
                          (lim, *mt_limits(), *(1 << 62,) * 3, *self._nt_cfg()))

    def _nt_cfg(self) -> tuple:
        """(rows, depth, dots limit): NT_NN's row of this level (none: dot products always) and
        NT_DOTS_LIMITS' value on this host (none: no limit)."""
        rows, depth = NT_NN.get(self.row.level, (1 << 62, -1))
        nt_lim = nt_dots_limit(self.row.level)
        return rows, depth, 1 << 62 if nt_lim is None else nt_lim

    def _made(self, new, args: tuple) -> Callable:
        """The function C's ``new(*args)`` makes, its new reference (returned as ``void *``)
        taken over; ``_no_pyfast`` where the module has no such constructor or it returned NULL."""
        p = new(*args) if new is not None else self.null
        if p == self.null:
            return _no_pyfast
        f = ctypes.cast(int(self.ffi.cast("uintptr_t", p)), ctypes.py_object).value
        ctypes.pythonapi.Py_DecRef(ctypes.py_object(f))  # C's reference is now f's
        return f


def _no_pyfast(*args):
    return None


def mt_limits() -> tuple[int, int]:
    """(mt0, mt8): the M*N*K from which a small product runs on more than one thread when more are
    allowed (``mt_threads``): any rows, and from 8 rows in the nn form (MT_ON off: never)."""
    if not MT_ON:
        return 1 << 62, 1 << 62
    return int(MT_MIN_FLOPS // 2), int(MT_MIN_FLOPS_NN // 2)


_bound: dict = {"matmul": {}, "linear": {}}
# The scoped cap (``cap._scoped``'s value: None outside ``with max_isa()`` blocks) -> (
# op_gemm_f32_small_cc, from_buffer, op_gemm_f32_small_mt, NULL, limit, one-thread limit, the
# one-row product's ROW_LIMITS K*N, N and K on this host, Bound.pyfast's function) of matmul's
# small row at the level in force there.
# Filled by ``bound`` (once per key) while ONEPATH_VERBOSE is off; emptied when verbose is re-read,
# the process cap changes, ``reset`` (after a change of the limits) and ``matmul.set_mt_limits``.
# matmul's fast path reads it with one ContextVar read and one dict lookup.
fast_matmul: dict = {}
# The same for linear: the scoped cap -> Bound.pyfast_linear's function of linear's small row.
fast_linear: dict = {}
for _d in (fast_matmul, fast_linear):
    _verbose.on_reload.append(_d.clear)
    _cap.on_change.append(_d.clear)
    _repro_mode.on_first_use.append(_d.clear)  # the fast paths do not test the mode


def bound(op: str) -> Bound:
    """The small row of ``op`` ("matmul" or "linear") at the ISA level in force, bound."""
    level = _cap.isa()
    cache = _bound[op]
    b = cache.get(level)
    if b is None:
        b = Bound(row_for(op, level))
        _stats.record(op, "float32", b.row.level, "small")  # it runs right after this lookup
        cache[level] = b
    key, table = _cap._scoped.get(), fast_matmul if op == "matmul" else fast_linear
    if key not in table and _verbose.enabled() is False and not _repro_mode._ever:
        # the entries ask the thread count only where a call runs more than one thread: a bad
        # ONEPATH_NUM_THREADS raises here (ValueError, at every call while it holds), so no entry
        # answers the calls the Python paths below would refuse
        _threads.get_num_threads()
        lims = limits(b.row.level)
        if op == "matmul":
            row = row_limits(b.row.level) or (1 << 62,) * 3
            table[key] = (b.cc, b.fb, b.mt, b.null) + lims + row + (b.pyfast(lims[0], row),)
        else:
            table[key] = b.pyfast_linear(lims[0])
        # Making the C function lets other threads run (cffi releases the GIL): one of them may
        # have turned verbose on, used the reproducible mode for the first time or changed the
        # process cap, emptying the tables before the entry above was stored. Those set their
        # state before emptying, so this check after the store sees it (found by the review: a
        # stale entry served reproducible() calls).
        if _verbose.enabled() is not False or _repro_mode._ever or _cap.isa() != level:
            table.pop(key, None)
    return b


@lru_cache(maxsize=None)
def row_for(op: str, level: str, dtype: str = "float32"):
    """The first ``algorithm="small"`` registry row of (op, dtype) that ``level`` may run."""
    cap_i = level_index(level)
    for row in registry.rows(op, dtype):
        if row.algorithm == "small" and level_index(row.level) <= cap_i:
            return row
    raise ValueError(f"no small-problem kernel for op={op!r} dtype={dtype!r} at level {level!r}")


_bound_bf16: dict = {}


def matmul_bf16(a, b, c_bf16: bool):
    """The bfloat16 small kernel on 2-D C-contiguous bfloat16 a (m, k), b (k, n): the (m, n) result,
    bfloat16 (rounded once) or float32; None when the problem is not small or an operand is not
    C-contiguous and aligned (the caller takes the bfloat16 GEMM)."""
    (m, k), (k2, n) = a.shape, b.shape
    if k2 != k or not use_small(m * n * k, "matmul", "bfloat16", n * k, m):
        return None
    level = _cap.isa()
    bd = _bound_bf16.get(level)
    if bd is None:
        row = row_for("matmul", level, "bfloat16")
        mod = load(row.level)
        bd = _bound_bf16[level] = (row, mod.lib.op_gemm_bf16_small_cc, mod.ffi.from_buffer)
        _stats.record("matmul", "bfloat16", row.level, "small")
    row, fn, fb = bd
    a = a if a.flags.aligned else a.copy()  # misaligned (e.g. unpickled): copied, as the GEMM path
    b = b if b.flags.aligned else b.copy()  # does, so the path does not depend on the address
    c = _empty((m, n), a.dtype if c_bf16 else _F32)
    t0 = time.perf_counter()
    try:
        if not fn(m, n, k, fb(a), fb(b), fb(c), 1 if c_bf16 else 0):
            return None
    except ValueError:  # not C-contiguous
        return None
    if _verbose.enabled():
        _verbose.emit("matmul", "bf16:bf16:" + ("bf16" if c_bf16 else "f32"), row.level, row.name,
                      f"{m}x{k}:{k}x{n}", 1, time.perf_counter() - t0)
    return c


def emit(op: str, b: Bound, shapes: str, t0: float, threads: int = 1) -> None:
    """The verbose line of a small-path call."""
    _verbose.emit(op, "f32:f32:f32", b.row.level, b.row.name, shapes, threads,
                  time.perf_counter() - t0)


def _rows_ready(x) -> bool:
    """2-D float32 with contiguous rows (the nt form reads rows along K), aligned."""
    st = x.strides
    return st[1] == 4 and st[0] % 4 == 0 and x.flags.aligned


def linear(x, w, out, bias, code: int, shapes: str, wt=None) -> bool:
    """out (m, n) = x (m, k) @ w (n, k).T (+ bias (n,) float32 contiguous, activation OP_ACT
    ``code``) with the small kernel's nt form, or its nn form on ``wt`` (w transposed, (k, n)
    C-contiguous: ``PackedWeight.small_b``) when given; False (nothing done) when x or w does not
    have contiguous rows."""
    if not (_rows_ready(x) and _rows_ready(w)):
        return False
    b = bound("linear")
    ffi = b.ffi
    m, k = x.shape
    n = w.shape[0]
    epi = ffi.NULL
    if bias is not None or code:
        epi = ffi.new("op_epilogue *")
        if bias is not None:
            epi.bias = ffi.cast("const float *", bias.ctypes.data)
            epi.bias_stride = 1
            epi.bias_axis = 1
        epi.act = code
    fb = b.fb
    t0 = time.perf_counter()
    xp = fb(x) if x.flags.c_contiguous else ffi.cast("float *", x.ctypes.data)
    t = mt_threads(m, m * n * k, wt is not None)
    if wt is not None:
        used = b.mt(m, n, k, xp, x.strides[0] >> 2, 1, fb(wt), n, 1, fb(out), n, 1, epi, t)
    else:
        wp = fb(w) if w.flags.c_contiguous else ffi.cast("float *", w.ctypes.data)
        used = b.mt(m, n, k, xp, x.strides[0] >> 2, 1, wp, 1, w.strides[0] >> 2, fb(out), n, 1,
                    epi, t)
    if _verbose.enabled():
        emit("linear", b, shapes, t0, used)
    return True


def linear_fast(x, w, bias, code, packed):
    """``linear``'s first try: x (m, k) (or (..., k), its batch axes taken as rows) and w (n, k)
    float32 C-contiguous ndarrays, bias None or a float32 C-contiguous (n,) ndarray, ``code`` an
    OP_ACT_* (None: an activation name to check), a small problem, verbose off; ``packed``: the
    PackedWeight ``w`` is the weight of (None for a raw weight), whose transposed copy
    (``small_b``) then runs the nn form above ``NT_MAX_M`` rows. Returns the (m, n) (or (..., n))
    result, or None for the checked path."""
    if code is None or type(w) is not _ND or w.dtype is not _F32 or _verbose._enabled is not False:
        return None
    lead = None
    if x.ndim != 2:  # (..., k): a C-contiguous x's batch axes fold into rows (a view)
        if x.ndim == 0 or not x.shape[-1] or not x.flags.c_contiguous:
            return None
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])
    try:
        (m, k), (n, k2) = x.shape, w.shape
    except ValueError:
        return None
    if k2 != k or not k or not use_small(m * n * k, "linear", "float32", n * k,
                                         thin_rows(m, packed),
                                         k if packed is None or m <= NT_MAX_M else None, n):
        return None
    if bias is not None and (bias.dtype is not _F32 or bias.shape != (n,)):
        return None
    if packed is not None:
        packed.current()  # the cap rules of a PackedWeight hold on this path too
        if m <= NT_MAX_M:
            packed = None  # the raw weight's nt form
        else:
            w = packed.small_b()  # (k, n): the nn form
    b = bound("linear")
    ffi, fb = b.ffi, b.fb
    out = _empty((m, n), _F32)
    try:
        xp, wp, op = fb(x), fb(w), fb(out)
        epi = ffi.NULL
        if bias is not None or code:
            epi = ffi.new("op_epilogue *")
            if bias is not None:
                bp = fb(bias)  # alive until the call returns
                epi.bias = ffi.cast("const float *", bp)
                epi.bias_stride = 1
                epi.bias_axis = 1
            epi.act = code
    except ValueError:  # not C-contiguous
        return None
    t = mt_threads(m, m * n * k, packed is not None)
    if packed is not None:
        b.mt(m, n, k, xp, k, 1, wp, n, 1, op, n, 1, epi, t)
    else:
        b.mt(m, n, k, xp, k, 1, wp, 1, k, op, n, 1, epi, t)
    return out if lead is None else out.reshape(lead + (n,))
