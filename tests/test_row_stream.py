"""The float32 row-stream path (kernels/gemv_f32.c, op_kn_f32): x @ W with a row-major W and at most
16 rows of x, at every ISA level: every row-group size, column tails (vector and scalar), strided
operands, batches, the fused epilogue and the thread split."""
from __future__ import annotations

import math

import numpy as np
import pytest

import onepath

from conftest import assert_gemm_close

RNG = np.random.default_rng(4321)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 11, 16])
def test_row_stream_shapes(level, m):
    for k, n in ((1, 128), (9, 130), (37, 300), (64, 263)):
        a, w = rand(m, k), rand(k, n)
        assert_gemm_close(onepath.matmul(a, w), a, w)


@pytest.mark.parametrize("m", range(1, 17))
def test_row_stream_every_row_count(level, m):
    # the small kernel off: every shape takes the row stream (the shapes above are within its
    # limits); every split into row groups (AVX2: 4 + 4 + ..., AVX-512: 16 / 8 + the rest), and
    # column tails after whole tiles: 24- and 16-column tiles, single vectors, scalar columns
    from onepath.ops import _small
    with _small.off():
        for k, n in ((1, 128), (9, 130), (37, 300), (20, 512 + 24 + 16 + 8 + 3), (17, 775)):
            a, w = rand(m, k), rand(k, n)
            assert_gemm_close(onepath.matmul(a, w), a, w)


def test_row_stream_strided_and_batched(level):
    a = rand(7, 90)[:, ::2]                       # A columns 2 apart (csa == 2)
    w = rand(45, 400)[:, 5:395]                   # W rows longer than N (rsb > n)
    assert_gemm_close(onepath.matmul(a, w), a, w)
    out = np.zeros((7, 2 * 390), np.float32)[:, ::2]  # C columns 2 apart (csc == 2)
    onepath.matmul(a, w, out=out)
    assert_gemm_close(out, a, w)
    ba, bw = rand(3, 4, 33), rand(3, 33, 200)
    assert_gemm_close(onepath.matmul(ba, bw), ba, bw)
    x = rand(2, 33)[None]                         # x broadcast over W's batch
    assert_gemm_close(onepath.matmul(x, bw), x, bw)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_row_stream_linear_epilogue(level, activation):
    # linear(x, weight) with weight = W^T for a row-major W (k x n): B = weight^T = W is row-major
    x, w, bias = rand(4, 70), rand(70, 150), rand(150)
    y = onepath.linear(x, w.T, bias, activation=activation)
    z = x.astype(np.float64) @ w.astype(np.float64) + bias
    f = {None: lambda t: t, "relu": lambda t: np.maximum(t, 0),
         "gelu": lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2))),
         "silu": lambda t: t / (1 + np.exp(-t))}[activation]
    assert np.allclose(y, f(z), rtol=1e-4, atol=1e-4)


def test_row_stream_threads_split(level, cpus):
    cpus(4)  # a 3-thread split also on a 2-CPU host
    a, w = rand(3, 500), rand(500, 3000)
    old = onepath.get_num_threads()
    try:
        for t in (1, 2, 3):
            onepath.set_num_threads(t)
            assert_gemm_close(onepath.matmul(a, w), a, w)
    finally:
        onepath.set_num_threads(old)


# ---- the per-microarchitecture options (registry.GEMV_F32_OPTIONS, op_gemv_f32_options): all off
# and all on (independent code paths), on the module the forced level's float32 rows run, whatever
# this host ships ----

@pytest.fixture(params=[0, 3], ids=["opts_off", "prefetch+ksplit"])
def gemv_opts(level, request):
    from onepath.dispatch import registry
    from onepath.kernels import load
    lib = load(registry.select("matmul", "float32").level).lib
    old = lib.op_gemv_f32_options(request.param)
    yield request.param
    lib.op_gemv_f32_options(old)


def test_thin_options(gemv_opts, cpus):
    cpus(4)
    old = onepath.get_num_threads()
    try:
        for t in (1, 3):
            onepath.set_num_threads(t)
            # row stream (2 threads from 8 Mflop on): K split into parts of whole row blocks (k not a
            # multiple of them, a short last part), column tails, one and several row groups
            for m, k, n in ((1, 4100, 1100), (3, 1031, 2100), (8, 600, 1300), (12, 333, 1600), (16, 40, 7000),
                            (5, 37, 300)):
                a, w = rand(m, k), rand(k, n)
                assert_gemm_close(onepath.matmul(a, w), a, w)
            x, w, bias = rand(2, 2600), rand(2600, 900), rand(900)
            y = onepath.linear(x, w.T, bias, activation="relu")
            assert np.allclose(y, np.maximum(x.astype(np.float64) @ w + bias, 0), rtol=1e-4, atol=1e-4)
            # M <= 4 threaded from 1 MiB of B too (OP_KN_MIN_BYTES_PER_THREAD), below 8 Mflop
            for m, k, n in ((1, 1500, 1500), (2, 1100, 1100)):
                a, w = rand(m, k), rand(k, n)
                assert_gemm_close(onepath.matmul(a, w), a, w)
            # batched (no K split) and the dot path x @ W.T with its next-block prefetch
            ba, bw = rand(2, 1, 900), rand(2, 900, 300)
            assert_gemm_close(onepath.matmul(ba, bw), ba, bw)
            for m in (1, 2, 4):
                a, w = rand(m, 700), rand(1001, 700)
                assert_gemm_close(onepath.matmul(a, w.T), a, w.T)
    finally:
        onepath.set_num_threads(old)


def test_thin_options_same_bits_at_any_thread_count(gemv_opts, cpus):
    """x @ W on the row stream gives the same bits at 1, 2 and 3 threads with the options on too:
    the K split's parts are fixed by the problem (OP_KN_KSPLIT_PARTS), not by the thread count
    (they once were: zen4 ships "ksplit", and 1 x 4096 x 2048 differed in 1993 of 2048 outputs
    between 1 and 2 threads, which onepath.dask's workers, on their own thread counts, would
    show). Row chunks padded to the whole row count (as onepath.dask pads them) keep them."""
    cpus(4)
    old = onepath.get_num_threads()
    try:
        for m, k, n in ((1, 4100, 1100), (4, 2048, 2048), (16, 1031, 1600), (3, 600, 3000)):
            a, w = rand(m, k), rand(k, n)
            got = []
            for t in (1, 2, 3):
                onepath.set_num_threads(t)
                got.append(onepath.matmul(a, w).view(np.uint32))
            for t, r in zip((2, 3), got[1:]):
                assert np.array_equal(r, got[0]), f"{m}x{k}x{n}: {t} threads differ from 1"
    finally:
        onepath.set_num_threads(old)


def test_ksplit_row_counts(level):
    """The K split ("ksplit") sums K in two parts where it runs: up to 4 rows in the AVX2 build (16
    rows lost there, zen3), up to 16 in the AVX-512 builds; elsewhere the bits of the options off.
    Seen through the bits: with it on, a split product differs from the unsplit one somewhere."""
    from onepath.dispatch import registry
    from onepath.kernels import load
    row = registry.select("matmul", "float32")
    if row.level not in ("avx2", "avx512_core"):
        pytest.skip(f"{row.level}: the row stream's K split is measured for avx2 and avx512_core")
    lib = load(row.level).lib
    old = lib.op_gemv_f32_options(0)
    try:
        for m, split in ((1, True), (4, True), (16, row.level != "avx2")):
            a, w = rand(m, 2048), rand(2048, 2048)   # 16 MiB of B: the problem wants two threads
            lib.op_gemv_f32_options(0)
            off = onepath.matmul(a, w)
            lib.op_gemv_f32_options(registry.GEMV_F32_FLAGS["ksplit"])
            on = onepath.matmul(a, w)
            assert_gemm_close(on, a, w)
            assert (not np.array_equal(on.view(np.uint32), off.view(np.uint32))) is split, m
    finally:
        lib.op_gemv_f32_options(old)


def test_thin_options_table():
    from onepath.dispatch import registry
    assert registry.gemv_f32_flags("avx512_core", uarch="zen4") == 3
    assert registry.gemv_f32_flags("avx512_core", uarch="sapphirerapids") == 1
    assert registry.gemv_f32_flags("avx512_core", uarch="skylake") == 0
    assert registry.gemv_f32_flags("avx2", uarch="zen4") == 0
    assert registry.gemv_f32_flags("avx2", uarch="zen3") == 2
    assert all(o in registry.GEMV_F32_FLAGS for v in registry.GEMV_F32_OPTIONS.values() for o in v)
