"""Small calls (issue 9) and exactness outside the kernels (issue 12, faults 1 and 6).

- the small-problem kernel of every level (its registry rows, every form: nn, nt, strided),
  chosen by matmul and linear, shown in verbose lines;
- 0-d results are numpy's scalars, compared by exact type with numpy's over all dtypes;
- numpy's own TestMatmul run against onepath.matmul;
- every path onepath does not accelerate returns exactly the numpy expression of its docstring.
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np
import pytest

import onepath
from onepath.dispatch import rows
from onepath.dtypes import BF16
from onepath.kernels import load
from onepath.ops import _small
from onepath.ops.conv import reference_conv2d

from conftest import assert_gemm_close

RNG = np.random.default_rng(99)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- the small kernel, every level ----------------------------------------------------------

def test_small_rows_match_compiled_kernels(level):
    for op in ("matmul", "linear"):
        row = _small.row_for(op, level)
        assert row.algorithm == "small"
        lib = load(row.level).lib
        assert (lib.op_gemm_f32_small_mr(), lib.op_gemm_f32_small_nr()) == (row.mr, row.nr)
        name = load(row.level).ffi.string(lib.op_gemm_f32_small_name()).decode()
        assert name == row.name


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (4, 4, 4), (5, 3, 17), (7, 19, 33), (13, 64, 31),
                                   (6, 16, 32), (64, 64, 64), (12, 100, 47), (128, 128, 128)])
def test_small_matmul_forms(level, m, k, n):
    a, b = rand(m, k), rand(k, n)
    assert_gemm_close(onepath.matmul(a, b), a, b)                          # nn, contiguous
    assert_gemm_close(onepath.matmul(a, np.asfortranarray(b)), a, b)       # B columns: nt
    at = np.asfortranarray(a)
    assert_gemm_close(onepath.matmul(at, b), a, b)                         # A columns
    big = rand(m, 2 * k)
    assert_gemm_close(onepath.matmul(big[:, ::2], b[::-1][::-1]), big[:, ::2], b)  # strided


@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("shape", [(1, 5, 3), (3, 17, 9), (8, 64, 40)])
def test_small_linear(level, act, shape):
    from test_linear import _ref
    m, k, n = shape
    x, w, bias = rand(m, k), rand(n, k) / math.sqrt(k), rand(n)
    for bb in (None, bias):
        for wt in (w, onepath.prepack(w)):
            got = onepath.linear(x, wt, bb, activation=act)
            ref = _ref(x, w, bb, act)
            assert got.dtype == np.float32 and got.shape == (m, n)
            np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5 * math.sqrt(k))


@pytest.mark.parametrize("form", ["nn", "nt", "any"])
@pytest.mark.parametrize("m,k,n", [(1, 7, 33), (5, 19, 70), (13, 64, 97), (16, 40, 3),
                                   (9, 33, 200), (100, 33, 20), (257, 16, 32), (70, 24, 1),
                                   (50, 33, 20), (66, 33, 20), (66, 600, 24), (49, 9, 13),
                                   (4100, 512, 8), (70, 1000, 100)])
@pytest.mark.parametrize("bias_axis", [1, 0])
def test_small_mt_same_bits_as_one_thread(level, form, m, k, n, bias_axis):
    """op_gemm_f32_small_mt splits C's columns at whole tiles (the nn and nt forms with 32 columns
    or fewer: their rows): bit for bit the one-thread call at 1-5 threads, with a bias along
    columns or rows and an activation (each range its part of the bias), the output NaN-filled
    first so that an element left unwritten fails. At 5 threads the last row range of 50 or 66
    rows has 2, fewer than the nt form's transposed nn form takes (the whole call's rows choose
    it); K 600 is past that form's depth at AVX-512 (dot tiles). From 2^22 multiply-adds
    (4100 x 512 x 8, 70 x 1000 x 100: OP_SMALL_MT_BIG) each thread takes four ranges."""
    mod = load(_small.row_for("matmul", level).level)
    ffi, lib = mod.ffi, mod.lib
    a = rand(m, k)
    bt = rand(n, k)
    b = np.ascontiguousarray(bt.T) if form == "nn" else bt.T  # (k, n): rows / columns contiguous
    if form == "any":  # A column-major, B rows 2 apart: the plain loop
        a = np.asfortranarray(a)
        b = np.ascontiguousarray(np.repeat(bt.T, 2, axis=1))[:, ::2]
    bias = rand(n if bias_axis else m)
    epi = ffi.new("op_epilogue *")
    epi.bias = ffi.cast("const float *", bias.ctypes.data)
    epi.bias_stride, epi.bias_axis, epi.act = 1, bias_axis, 3  # gelu
    outs = []
    for t in (0, 1, 2, 3, 5):
        c = np.full((m, n), np.nan, np.float32)
        args = (m, n, k, ffi.cast("float *", a.ctypes.data), a.strides[0] >> 2, a.strides[1] >> 2,
                ffi.cast("float *", b.ctypes.data), b.strides[0] >> 2, b.strides[1] >> 2,
                ffi.cast("float *", c.ctypes.data), n, 1, epi)
        if t == 0:
            assert lib.op_gemm_f32_small(*args) == 1
        else:
            assert 1 <= lib.op_gemm_f32_small_mt(*args, t) <= t
        outs.append(c)
    assert not np.isnan(outs[0]).any()
    for c in outs[1:]:
        assert np.array_equal(c.view(np.uint32), outs[0].view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
def test_thin_products_take_the_threaded_small_kernel(level, threads, caplog, verbose_on,
                                                      small_mt_on):
    """With more than one thread, thin float32 products (up to 16 rows and K N <= 2^20, up to 4 rows
    and K N <= 2^22; B row-major: K N <= THIN_NN_KN too) take the small kernel above its M*N*K
    limits, on the pool from MT_MIN_FLOPS(_NN), at AVX-512 (the small row of avx512_core);
    results against the float64 product. One thread: the paths as before (the packed GEMM or the dot-product path above the
    limits)."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        row = _small.row_for("linear", level)
        cases = [(16, 384, 384, "linear"), (3, 1024, 1536, "linear"), (8, 640, 512, "matmul"),
                 (1, 2048, 1536, "matmul_t"), (20, 384, 384, "linear"), (4, 1024, 1024, "matmul")]
        for m, k, n, op in cases:
            x, w = rand(m, k), rand(n, k) / math.sqrt(k)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                if op == "linear":
                    y = onepath.linear(x, w)
                elif op == "matmul":
                    y = onepath.matmul(x, np.ascontiguousarray(w.T))
                else:
                    y = onepath.matmul(x, w.T)
            assert_gemm_close(y, x, w.T)
            thin = (row.level == "avx512_core" and threads > 1 and m <= 16
                    and not (op == "matmul" and k * n > _small.THIN_NN_KN))  # (the nn form)
            assert (row.name in caplog.text) == thin, (m, k, n, op, caplog.text)
            if thin:
                line = next(ln for ln in caplog.text.splitlines() if row.name in ln)
                # (threads=2, or 1 for 0.1 s after a call that found a pool worker without a
                # CPU: test_small_kernel_threads_as_shipped_and_switched_off checks the 2)
                assert f"{row.name},{m}x{k}" in line, line
    finally:
        onepath.set_num_threads(old)


def test_thin_prepacked_weight_keeps_its_panels_above_four_rows(level, caplog, verbose_on,
                                                                small_mt_on):
    """A PackedWeight: thin calls of up to NT_MAX_M rows take the threaded small kernel (nt form
    on the raw weight), more rows its packed panels (the packed GEMM measured faster)."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(2)
    try:
        small = _small.row_for("linear", level)
        w = rand(1536, 384) / math.sqrt(384)
        p = onepath.prepack(w)
        for m in (3, 12):
            x = rand(m, 384)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                y = onepath.linear(x, p)
            assert_gemm_close(y, x, w.T)
            took_small = small.name in caplog.text
            want = m <= _small.NT_MAX_M and small.level == "avx512_core"
            assert took_small == want, caplog.text
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("mt", [False, True])
def test_small_products_same_bits_at_any_thread_count(level, mt, request):
    """A product within the small kernel's limits gives the same bits at 1 and 2 threads (the
    threaded call splits C's columns at whole tiles), through matmul's fast entry, its ``out=``
    entry, its strided path (B column-major: the nt form) and linear; a misaligned C-contiguous
    operand or ``out`` (the fast entries' threaded call does not check) gives the product too."""
    if mt:
        request.getfixturevalue("small_mt_on")
    old = onepath.get_num_threads()
    a, b, bias = rand(128, 128), rand(128, 96), rand(96)
    raw = np.zeros(128 * 128 * 4 + 2, np.uint8)
    mis = np.frombuffer(raw.data, np.float32, 128 * 128, 2).reshape(128, 128)  # 2 bytes off
    try:
        res = []
        for t in (1, 2):
            onepath.set_num_threads(t)
            o = np.empty((128, 96), np.float32)
            res.append([onepath.matmul(a, b), onepath.matmul(a, b, out=o),
                        onepath.matmul(a, np.asfortranarray(b)),
                        onepath.matmul(np.asfortranarray(a), b),
                        onepath.linear(a, b.T.copy(), bias, activation="silu")])
            mis[...] = a
            assert not mis.flags.aligned and mis.flags.c_contiguous
            assert_gemm_close(onepath.matmul(mis, a), a, a)
            assert onepath.matmul(a, a, out=mis) is mis
            assert_gemm_close(mis, a, a)
        for x, y in zip(*res):
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32))
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_transposed_a_fast_entry_same_bits_as_general_path(level, threads):
    """matmul(X.T, B) (A F-contiguous, B C-contiguous): the fast entry's call gives the bits of the
    general path's (_matmul_f32, the strided small kernel or the GEMM), on either side of the
    threaded kernel's size and of the small limits."""
    from onepath.ops import matmul as mm
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        for m, k, n in [(5, 7, 9), (16, 16, 16), (40, 64, 48), (128, 128, 96), (200, 160, 120)]:
            x, b = rand(k, m), rand(k, n)
            got = onepath.matmul(x.T, b)
            want = mm._matmul_f32(x.T, b, None)
            assert_gemm_close(got, x.T, b)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (m, k, n)
    finally:
        onepath.set_num_threads(old)


def test_one_row_products_past_row_limits_take_the_row_stream(level, caplog, verbose_on):
    """x (1, K) @ W (K, N), W row-major: from this host's ROW_LIMITS (K*N, N and K all) the packed
    GEMM's row stream, below any the small kernel (narrow N: the row stream takes N >= 128)."""
    small_row = _small.row_for("matmul", level)
    lim = _small.row_limits(small_row.level)
    if lim is None:
        pytest.skip(f"no ROW_LIMITS row for {small_row.level} on this host: LIMITS alone decide")
    kn, wide, deep = lim
    for k, n, small in [(256, 256, True), (kn // 512, 512, False), (kn // 512 - 1, 512, True),
                        (kn // wide, wide, False), (kn // wide, wide - 1, True), (kn + 1, 4, True),
                        (kn, 1, True), (deep, kn // deep, False),
                        (deep - 1, kn // (deep - 1) + 1, True)]:
        x, w = rand(1, k), rand(k, n)
        assert _small.use_small(k * n, kn=k * n, m=1, n=n) is small, (k, n)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onepath"):
            y = onepath.matmul(x, w)
        assert (small_row.name in caplog.text) is small, (k, n, caplog.text)
        assert_gemm_close(y, x, w)


def _c_entry(level, monkeypatch):
    """The level's kernels/pyfast.inc function, as matmul's fast entry holds it."""
    from onepath import _repro_mode
    monkeypatch.setattr(_repro_mode, "_ever", False)  # (an earlier test's mode empties the entry)
    _small.fast_matmul.clear()
    _small.bound("matmul")   # fills the fast entry of the level in force
    from onepath.dispatch import cap
    f = _small.fast_matmul[cap._scoped.get()][9]   # (keyed by the scoped cap the fixture set)
    assert f is not _small._no_pyfast, "the level module has no pyfast function"
    return f


@pytest.mark.parametrize("threads", [1, 2])
def test_c_entry_same_bits_as_the_kernel_call(level, threads, monkeypatch):
    """matmul's C entry (kernels/pyfast.inc) takes the tiniest 2-D products (within LIMITS' first
    value, on the threads matmul runs them): bit for bit the small kernel's call that the out=
    entry makes, on C-ordered float32 operands, read-only ones and ones inside larger buffers; it
    gives up (None) past LIMITS' first value and for one-row products past ROW_LIMITS."""
    f = _c_entry(level, monkeypatch)
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        lim = _small.limits(_small.row_for("matmul", level).level)[0]
        mt0, mt8 = _small.mt_limits()
        for m, k, n in [(1, 1, 1), (4, 4, 4), (3, 5, 7), (16, 16, 16), (7, 33, 9), (1, 300, 20),
                        (8, 40, 40), (40, 40, 40), (64, 64, 64), (2, 1, 2), (100, 90, 90),
                        (1, 4096, 1), (1, 513, 1), (9, 700, 1), (1, 700, 9), (120, 500, 1)]:
            a, b = rand(m, k), rand(k, n)
            a.setflags(write=False)
            mnk = m * n * k
            takes = mnk <= lim
            got = f(a, b)
            assert (got is not None) is takes, (m, k, n, lim, mt0, mt8)
            want = np.empty((m, n), np.float32)
            onepath.matmul(a, b, out=want)   # (the out= entry: op_gemm_f32_small_cc)
            y = onepath.matmul(a, b)
            assert y.dtype == np.float32 and y.shape == (m, n) and y.flags.c_contiguous
            np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))
            if takes:
                np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
            assert_gemm_close(y, a, b)
            # vector operands: their axis dropped, numpy's scalar for two vectors (a dot product
            # within the first limit at any size); the 2-D call's bits
            vecs = [(a, b[:, 0], want[:, 0], m * k * 1)] if n == 1 else []
            vecs += [(a[0], b, want[0], k * n)] if m == 1 else []
            vecs += [(a[0], b[:, 0], want[0, 0], k)] if m == n == 1 else []
            for x, v, w, vmnk in vecs:
                got = f(x, v)
                dot = x.ndim == v.ndim == 1
                assert (got is not None) is (vmnk <= lim), (x.shape, v.shape)
                for r in ([got] if got is not None else []) + [onepath.matmul(x, v)]:
                    assert type(r) is type(np.matmul(x, v)) and np.shape(r) == np.shape(w)
                    assert np.asarray(r).view(np.uint32).tolist() == np.asarray(w).view(np.uint32).tolist()
        # one row past ROW_LIMITS (where the host has them): the row stream, not this entry
        row = _small.row_limits(_small.row_for("matmul", level).level)
        if row is not None and row[0] <= lim:
            k = max(row[2], 1)
            n = max(row[1], -(-row[0] // k))
            assert f(rand(1, k), rand(k, n)) is None
    finally:
        onepath.set_num_threads(old)


def test_c_entry_follows_mt_on(level, monkeypatch):
    """The C entry carries the threaded small kernel's limits (MT_ON, mt_limits) it was made with:
    matmul.set_mt_limits forgets it, and the entry made anew takes the product within LIMITS' first
    value either way, with the bits of matmul's Python path into ``out``."""
    from onepath.ops import matmul as mm
    m, k, n = 4, 120, 120   # (M N K 57600: past mt0, fewer than 8 rows: two threads when allowed)
    a, b = rand(m, k), rand(k, n)
    assert _small.mt_limits()[0] <= m * n * k
    old = onepath.get_num_threads()
    onepath.set_num_threads(2)
    try:
        want = np.empty((m, n), np.float32)
        onepath.matmul(a, b, out=want)
        assert m * n * k <= _small.limits(_small.row_for("matmul", level).level)[0]
        got = _c_entry(level, monkeypatch)(a, b)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        monkeypatch.setattr(_small, "MT_ON", False)
        mm.set_mt_limits()
        try:
            assert not mm._fast and not _small.fast_linear
            assert _small.mt_limits()[0] > 1 << 40
            got = _c_entry(level, monkeypatch)(a, b)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        finally:
            monkeypatch.undo()
            mm.set_mt_limits()
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_c_entry_transposed_and_batched_same_bits(level, threads, monkeypatch):
    """The C entry takes x.T @ dy (A Fortran-ordered), x @ W.T (B Fortran-ordered: the nt form)
    and 3-D products of two or more entries (B C-ordered or W.transpose(0, 2, 1)) within LIMITS'
    first value: bit for bit the Python path's call for each (matmul's strided-A call into
    ``out``, _small.linear_fast, matmul._batch3_fast), at every thread count; it gives up on the
    layouts those paths do not take."""
    from onepath.ops import matmul as mm
    f = _c_entry(level, monkeypatch)
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    row = _small.row_for("matmul", level)
    lim = _small.limits(row.level)[0]
    try:
        for m, k, n in [(2, 3, 2), (5, 7, 3), (16, 16, 16), (12, 40, 9), (64, 64, 64),
                        (40, 100, 30), (3, 200, 50), (100, 90, 90)]:
            mnk = m * n * k
            x, dy, w = rand(k, m), rand(k, n), rand(n, k)
            # A = X.T
            want = np.empty((m, n), np.float32)
            onepath.matmul(x.T, dy, out=want)
            got = f(x.T, dy)
            assert (got is not None) is (mnk <= lim), (m, k, n)
            for r in ([got] if got is not None else []) + [onepath.matmul(x.T, dy)]:
                np.testing.assert_array_equal(r.view(np.uint32), want.view(np.uint32))
            # B = W.T
            a = rand(m, k)
            want = _small.linear_fast(a, w, None, 0, None)
            got = f(a, w.T)
            if want is None:
                assert got is None, (m, k, n)
            else:
                assert got is not None or mnk > lim, (m, k, n)
                for r in ([got] if got is not None else []) + [onepath.matmul(a, w.T)]:
                    np.testing.assert_array_equal(r.view(np.uint32), want.view(np.uint32))
            # batched
            for nb in (2, 5):
                a3, b3, w3 = rand(nb, m, k), rand(nb, k, n), rand(nb, n, k)
                for bb in (b3, w3.transpose(0, 2, 1)):
                    want = mm._batch3_fast(a3, bb)
                    got = f(a3, bb)
                    assert (got is None) is (want is None), (nb, m, k, n, bb.strides)
                    if want is not None:
                        assert got.shape == (nb, m, n) and got.flags.c_contiguous
                        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        # what those paths do not take: either operand with another layout, a batch of one,
        # batches that differ or broadcast, 3-D against 2-D, a vector against W.T
        a3, b3 = rand(3, 4, 5), rand(3, 5, 6)
        for x, y in [(a3.transpose(0, 2, 1).copy().transpose(0, 2, 1), b3), (a3[:1], b3[:1]),
                     (a3, b3[:2]), (a3, b3[:1]), (a3, b3[0]), (a3[0], b3), (a3[:, ::2], b3[:, ::2]),
                     (rand(6, 4).T, rand(5, 6).T), (rand(5), rand(6, 5).T),
                     (rand(5, 4).T, rand(5)), (rand(2, 3, 4, 5), rand(2, 3, 5, 6))]:
            assert f(x, y) is None, (x.shape, x.strides, y.shape, y.strides)
            try:
                want = np.matmul(x, y)
            except ValueError:   # (batches that differ)
                with pytest.raises(ValueError):
                    onepath.matmul(x, y)
                continue
            np.testing.assert_allclose(onepath.matmul(x, y), want, rtol=1e-4, atol=1e-4)
    finally:
        onepath.set_num_threads(old)


def test_bad_thread_count_raises_at_every_call(level, monkeypatch):
    """A bad ONEPATH_NUM_THREADS (no set_num_threads call) raises ValueError at every call that
    asks the thread count: the fast entries are not made while it holds (bound raises), so no C
    entry answers what the Python paths refuse (the review: x @ W.T and 3-D products below mt0
    were answered from the second call on)."""
    from onepath import _threads
    from onepath import _repro_mode
    monkeypatch.setattr(_repro_mode, "_ever", False)
    monkeypatch.setattr(_threads, "_num_threads", None)
    monkeypatch.setattr(_threads, "_env_threads", None)
    monkeypatch.setenv("ONEPATH_NUM_THREADS", "two")
    _small.reset()
    try:
        with pytest.raises(ValueError, match="ONEPATH_NUM_THREADS"):
            _small.bound("matmul")
        assert not _small.fast_matmul and not _small.fast_linear
        x, w, a3, b3 = rand(4, 8), rand(3, 8), rand(2, 4, 8), rand(2, 8, 5)
        calls = [lambda: onepath.matmul(x, w.T), lambda: onepath.matmul(a3, b3),
                 lambda: onepath.matmul(a3, rand(2, 5, 8).transpose(0, 2, 1)),
                 lambda: onepath.linear(x, w), lambda: onepath.matmul(rand(4, 120), rand(120, 120))]
        for f in calls:
            for _ in range(3):
                with pytest.raises(ValueError, match="ONEPATH_NUM_THREADS"):
                    f()
        assert not _small.fast_matmul and not _small.fast_linear
    finally:
        monkeypatch.undo()
        _small.reset()


def test_c_entry_raises_what_get_num_threads_raises(level, monkeypatch):
    """Where the C entry asks the thread count (a product past mt0) and get_num_threads raises
    (here a stand-in), the call raises it, as the Python path would, with nothing leaked."""
    from onepath import _threads
    f = _c_entry(level, monkeypatch)
    a, b = rand(4, 120), rand(120, 120)   # (57600: past mt0, fewer than 8 rows)
    lim = _small.limits(_small.row_for("matmul", level).level)[0]
    if not _small.mt_limits()[0] <= 4 * 120 * 120 <= lim:
        pytest.skip("4 x 120 x 120 is not within [mt0, LIMITS' first value] here")

    def boom():
        raise RuntimeWarning("stand-in")

    monkeypatch.setattr(_threads, "get_num_threads", boom)
    for x, y in ((a, b), (a, b.T.copy().T), (a[None].repeat(2, 0), b[None].repeat(2, 0))):
        with pytest.raises(RuntimeWarning, match="stand-in"):
            f(x, y)
    assert f(rand(4, 4), rand(4, 4)) is not None   # (one thread: not asked)


@pytest.mark.parametrize("event", ["reproducible", "verbose", "cap"])
def test_fast_entry_not_kept_when_its_state_changes_while_made(event, monkeypatch):
    """Making a fast entry's C function lets other threads run (cffi releases the GIL); if one of
    them turns verbose on, uses the reproducible mode for the first time or changes the process cap
    meanwhile (each empties the tables), the entry is not kept (the review's race: a stale entry
    then served reproducible() calls). Simulated here inside the constructor."""
    from onepath import _repro_mode, _verbose
    best = onepath.isa()
    if event == "cap" and best == "generic":
        pytest.skip("the host's best level is generic: no lower process cap to change to")
    monkeypatch.setattr(_repro_mode, "_ever", False)

    def meanwhile():
        if event == "reproducible":
            _repro_mode._mark_used()
        elif event == "verbose":
            monkeypatch.setenv("ONEPATH_VERBOSE", "1")
            _verbose.reload()
        else:
            onepath.max_isa("generic")   # the process cap

    for name in ("pyfast", "pyfast_linear"):
        made = getattr(_small.Bound, name)
        monkeypatch.setattr(_small.Bound, name,
                            lambda self, *a, made=made: (meanwhile(), made(self, *a))[1])
    try:
        for op, table in (("matmul", _small.fast_matmul), ("linear", _small.fast_linear)):
            onepath.max_isa(best)
            monkeypatch.setattr(_repro_mode, "_ever", False)
            monkeypatch.delenv("ONEPATH_VERBOSE", raising=False)
            _verbose.reload()
            _small.reset()
            _small.bound(op)
            assert not table, (op, event)
    finally:
        monkeypatch.undo()
        onepath.max_isa(best)
        _verbose.reload()
        _small.reset()


def test_c_entry_declines_what_it_does_not_take(level, monkeypatch):
    """The C entry answers None, with no error set and nothing kept, for anything but two exact
    native float32 ndarrays of the layouts it takes (1-D or 2-D C-ordered here; the transposed and
    3-D ones: test_c_entry_transposed_and_batched_same_bits) with a core match and no empty side;
    matmul then answers as numpy does (values, shapes, errors)."""
    import sys
    f = _c_entry(level, monkeypatch)
    a, b = rand(6, 5), rand(5, 4)

    class Sub(np.ndarray):
        pass

    raw = bytearray(6 * 5 * 4 + 8)
    off = 1 + (-np.frombuffer(raw, np.uint8).ctypes.data) % 4   # a start 1-3 bytes past alignment
    misaligned = np.frombuffer(raw, np.float32, 6 * 5, off).reshape(6, 5)
    misaligned[...] = a
    assert not misaligned.flags.aligned
    cases = [(a[:, ::-1], b), (a, b[:, :3]), (a.astype(np.float64), b),
             (a.astype(">f4"), b), (a.view(Sub), b), (a[None], b), (a, b[None]), (a[0, :1], b),
             (a[:0], b), (a[:, :0], b[:0]), (a, rand(4, 4)), (a.tolist(), b), (a, 2.0),
             (misaligned, b), (a.astype(BF16), b.astype(BF16)), (a, b.astype(np.float16))]
    refs = [sys.getrefcount(x) for pair in cases for x in pair]
    for x, y in cases:
        for _ in range(100):   # (a reference kept per call would show below)
            assert f(x, y) is None, (getattr(x, "shape", x), getattr(y, "shape", y))
        try:
            want = np.matmul(np.asarray(x, np.float64 if isinstance(x, list) else None), y)
        except (ValueError, TypeError) as e:
            with pytest.raises(type(e)):
                onepath.matmul(x, y)
            continue
        got = onepath.matmul(x, y)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                   rtol=1e-2, atol=1e-2)
    del x, y
    assert [sys.getrefcount(x) for pair in cases for x in pair] == refs
    taken = rand(3, 3)
    before = sys.getrefcount(taken)
    for _ in range(100):
        assert sys.getrefcount(f(taken, taken)) == 2   # (the result: its one reference, the call's)
    assert sys.getrefcount(taken) == before
    assert f(a) is None and f(a, b, b) is None and f() is None


def _c_linear(level, monkeypatch):
    """The level's kernels/pyfast.inc linear function, as linear's fast entry holds it."""
    from onepath import _repro_mode
    from onepath.dispatch import cap
    monkeypatch.setattr(_repro_mode, "_ever", False)
    _small.reset()
    _small.bound("linear")
    f = _small.fast_linear[cap._scoped.get()]
    assert f is not _small._no_pyfast, "the level module has no pyfast linear function"
    return f


@pytest.mark.parametrize("threads", [1, 2])
def test_c_linear_same_bits_as_the_python_path(level, threads, monkeypatch):
    """linear's C entry takes the tiniest calls with a raw weight (within LIMITS' first value, on
    the threads linear runs them; dot products within NT_DOTS_LIMITS at one thread, here a made-up
    row): bit for bit the call of
    linear's Python fast path (_small.linear_fast), with and without a bias, every activation, a
    1-D or 2-D x; it leaves the rest to that path."""
    from onepath.dispatch.cpu import probe
    from onepath.ops.linear import _ACT_CODE
    row = _small.row_for("linear", level)
    monkeypatch.setitem(_small.NT_DOTS_LIMITS, (probe().uarch, row.level), 3000)
    f = _c_linear(level, monkeypatch)
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        lim = _small.limits(row.level)[0]
        mt0 = _small.mt_limits()[0]
        for m, k, n in [(1, 1, 1), (1, 64, 64), (3, 5, 7), (4, 30, 20), (16, 16, 16), (12, 20, 10),
                        (20, 40, 30), (1, 300, 40), (50, 60, 20), (2, 1, 3)]:
            x, w, bias = rand(m, k), rand(n, k), rand(n)
            mnk = m * n * k
            dots = _small.nt_dots(m, k, row.level)
            takes = mnk <= lim and (not dots or mnk <= 3000 or threads > 1)
            for act, code in _ACT_CODE.items():
                for bb in (None, bias):
                    for xx in ((x, x[0]) if m == 1 else (x,)):
                        got = f(xx, w, bb, code)
                        assert (got is not None) is takes, (m, k, n, lim, mt0, dots)
                        x2 = xx.reshape(-1, k)
                        want = _small.linear_fast(x2, w, bb, code, None)
                        y = onepath.linear(xx, w, bb, activation=act)
                        assert y.shape == xx.shape[:-1] + (n,) and y.dtype == np.float32
                        if want is None:   # (the checked path: its answer)
                            continue
                        want = want.reshape(y.shape)
                        for r in ([got] if got is not None else []) + [y]:
                            assert r.shape == want.shape
                            np.testing.assert_array_equal(r.view(np.uint32), want.view(np.uint32))
    finally:
        onepath.set_num_threads(old)


def test_c_linear_declines_what_it_does_not_take(level, monkeypatch):
    """linear's C entry answers None (no error set, nothing kept) for a PackedWeight, a weight or x
    not C-ordered native float32 1-D / 2-D (a 3-D x: the Python path folds it), a bias of another
    shape or dtype or layout, an activation code out of range or not an int; linear then answers
    as its docstring says."""
    import sys
    f = _c_linear(level, monkeypatch)
    x, w, bias = rand(5, 6), rand(4, 6), rand(4)
    cases = [(x, onepath.prepack(w), None, 0), (x, np.asfortranarray(w), None, 0),
             (np.asfortranarray(x), w, None, 0), (x[None], w, None, 0), (x, w[:, :5], None, 0),
             (x, w, bias[:3], 0), (x, w, bias.astype(np.float64), 0), (x, w, bias[None], 0),
             (x, w, np.float32(1.0), 0), (x, w, bias[::-1], 0), (x, w, None, 5), (x, w, None, -1),
             (x, w, None, 1.0), (x, w, None, 2 ** 70), (x.astype(np.float64), w, None, 0),
             (x, w.astype(BF16), None, 0), (x[:, :0], w[:, :0], None, 0), (x[:0], w, None, 0)]
    arrays = [v for case in cases for v in case if isinstance(v, np.ndarray)]
    refs = [sys.getrefcount(v) for v in arrays]
    for case in cases:
        for _ in range(50):
            assert f(*case) is None, [getattr(v, "shape", v) for v in case]
    for xx, ww, bb, code in cases:
        if code != 0 or type(code) is not int:   # (the activations: test_linear)
            continue
        try:
            y = onepath.linear(xx, ww, bb)
        except ValueError:
            continue
        wu = ww.weight() if isinstance(ww, onepath.PackedWeight) else np.asarray(ww, np.float64)
        want = np.asarray(xx, np.float64) @ wu.T + (0 if bb is None else np.asarray(bb, np.float64))
        np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=1e-2, atol=1e-2,
                                   err_msg=str([getattr(v, "shape", v) for v in (xx, ww, bb, code)]))
    del case, xx, ww, bb
    assert [sys.getrefcount(v) for v in arrays] == refs
    taken = rand(3, 6)
    before = sys.getrefcount(taken), sys.getrefcount(w), sys.getrefcount(bias)
    for _ in range(100):
        assert sys.getrefcount(f(taken, w, bias, 1)) == 2
    assert (sys.getrefcount(taken), sys.getrefcount(w), sys.getrefcount(bias)) == before
    assert f(x, w, None) is None and f() is None


def test_linear_unhashable_activation_is_a_value_error(level, monkeypatch):
    """An unhashable activation is linear's documented ValueError (unknown activation) for any x,
    also once the C entry is filled (the review: its lookup raised TypeError first)."""
    _c_linear(level, monkeypatch)
    for x, w in ((rand(2, 3), rand(4, 3)), (np.ones((2, 3)), np.ones((4, 3))), ([[1.0] * 3], rand(4, 3))):
        for act in (["relu"], {}, {"relu": 1}):
            with pytest.raises(ValueError, match="activation"):
                onepath.linear(x, w, activation=act)


def test_one_row_fast_entries_route_as_the_general_path(level, monkeypatch):
    """matmul's fast entries (2-D, vector @ matrix, out=) and a batch of one entry apply ROW_LIMITS
    as the general path does: the same bits on both sides of the limits; a batch of two one-row
    entries keeps the small kernel (the 2-D call's bits below the limits, close above them)."""
    from onepath import _repro_mode
    from onepath.ops import matmul as mm
    monkeypatch.setattr(_repro_mode, "_ever", False)  # (an earlier test's mode empties the entry)
    _small.fast_matmul.clear()
    _small.bound("matmul")   # fills the fast entry of the level in force
    kn, wide, deep = _small.row_limits(_small.row_for("matmul", level).level) or (1 << 18, 128, 32)
    for k, n in [(256, 256), (kn // 512, 512), (kn // 512 - 1, 512), (kn // wide, wide),
                 (kn // wide, wide - 1), (kn + 1, 4), (deep - 1, kn // (deep - 1) + 1)]:
        x, w = rand(1, k), rand(k, n)
        want = mm._matmul_f32(x, w, None)
        o = np.empty((1, n), np.float32)
        for r in (onepath.matmul(x, w), onepath.matmul(x[0], w)[None], onepath.matmul(x, w, out=o),
                  onepath.matmul(x[None], w)[0], onepath.matmul(x[None], w[None])[0]):
            assert np.array_equal(r.view(np.uint32), want.view(np.uint32)), (k, n)
        x2 = rand(2, 1, k)
        y2 = onepath.matmul(x2, w)
        assert_gemm_close(y2[1], x2[1], w)
        left = (_small.use_small(k * n, kn=k * n, m=1)
                and not _small.use_small(k * n, kn=k * n, m=1, n=n))   # (by ROW_LIMITS)
        if left:
            assert _small.use_small_batched(k * n, k * n, 1)   # (a batch of two: the small kernel)


def test_small_threaded_calls_from_several_python_threads(level, small_mt_on):
    """Concurrent calls of the threaded small kernel: one holds the pool, the others run on their
    calling thread (op_parallel_for_short); every result has the one-call bits."""
    from concurrent.futures import ThreadPoolExecutor
    old = onepath.get_num_threads()
    onepath.set_num_threads(2)
    try:
        a, b, x, w = rand(128, 128), rand(128, 160), rand(3, 1024), rand(1536, 1024)
        want = [onepath.matmul(a, b), onepath.linear(x, w)]

        def work(i):
            with onepath.max_isa(level):  # (the test's scoped cap does not reach pool threads)
                return [onepath.matmul(a, b), onepath.linear(x, w)]
        with ThreadPoolExecutor(4) as ex:
            for got in ex.map(work, range(40)):
                for g, r in zip(got, want):
                    assert np.array_equal(g.view(np.uint32), r.view(np.uint32))
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("mt_on", [True, False])
def test_small_kernel_threads_as_shipped_and_switched_off(mt_on, caplog, verbose_on):
    """ops._small.MT_ON is on as shipped: at 2 threads a 128^3 product runs the small kernel on both
    threads and a thin product above the limits (16 x 384 x 384) takes it too; off, the one-thread
    small kernel and the thin product's former path."""
    from onepath.ops import matmul as mm
    assert _small.MT_ON is True
    old = onepath.get_num_threads()
    onepath.set_num_threads(2)
    _small.MT_ON = mt_on
    mm.set_mt_limits()
    try:
        for _ in range(5):  # (after a call that found a worker without a CPU, small calls run on
            time.sleep(0.15)  # one thread for 0.1 s: kernels/threads.c, op_parallel_for_short)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                onepath.matmul(rand(128, 128), rand(128, 128))
                onepath.linear(rand(16, 384), rand(384, 384))
            lines = caplog.text.splitlines()
            big = next(ln for ln in lines if "128x128:128x128" in ln)
            thin = next(ln for ln in lines if "16x384" in ln)
            if not mt_on or "threads=2" in big:
                break
        if mt_on and onepath.isa().startswith("avx512"):
            assert "threads=2" in big and "gemm_f32_small" in thin
        elif not mt_on:
            assert "threads=1" in big and "gemm_f32_small" not in thin
    finally:
        _small.MT_ON = True
        mm.set_mt_limits()
        onepath.set_num_threads(old)


def test_small_verbose_names_kernel(level, caplog, verbose_on):
    a = rand(4, 4)
    with caplog.at_level(logging.INFO, logger="onepath"):
        onepath.matmul(a, a)
        onepath.linear(a, a, a[0])
    row = _small.row_for("matmul", level)
    assert f"matmul,f32:f32:f32,{row.level},{row.name}" in caplog.text
    assert f"linear,f32:f32:f32,{row.level},{row.name}" in caplog.text


def test_limits_per_level(level):
    row = _small.row_for("matmul", level)
    lim, lim1t = _small.limits(row.level)   # (LIMITS, or this host's LIMITS_UARCH row)
    assert _small.use_small(lim) and not _small.use_small(max(lim, lim1t) + 1)
    a, b = rand(3, 5), rand(5, 4)
    assert_gemm_close(onepath.matmul(a, b), a, b)


def test_info_lists_small_rows():
    from onepath.info import kernel_rows
    names = {r.get("name") for r in kernel_rows() if r.get("algorithm") == "small"}
    assert any(n.startswith("gemm_f32_small_") for n in names)
    assert {r.level for r in rows("matmul", "float32") if r.algorithm == "small"} >= {"generic"}


# ---- 0-d results: numpy's scalars -------------------------------------------------------------

ZERO_D_TYPES = ["?", "b", "h", "i", "l", "q", "B", "e", "f", "d", "g", "F", "D", "O"]


@pytest.mark.parametrize("dt", ZERO_D_TYPES)
def test_zero_d_result_types_match_numpy(dt):
    v = np.ones(5, dt)
    got, want = onepath.matmul(v, v), np.matmul(v, v)
    assert type(got) is type(want) and got == want
    out = np.zeros((), dt)
    assert onepath.matmul(v, v, out=out) is out
    assert type(onepath.matmul(v[:0], v[:0])) is type(np.matmul(v[:0], v[:0]))


def test_zero_d_float32_and_bfloat16_every_level(level):
    for n in (0, 1, 5, 300):
        v = rand(n)
        got = onepath.matmul(v, v)
        assert type(got) is np.float32
        assert type(onepath.matmul(v[None, :], v[:, None].T.T)) is np.ndarray
        b = v.astype(BF16)
        assert type(onepath.matmul(b, b)) is BF16.type                 # bf16 x bf16 -> bfloat16
        assert type(onepath.matmul(b, v)) is np.float32                 # widened: float32
        assert type(onepath.matmul(b, b, dtype=np.float32)) is np.float32
        out = np.zeros((), np.float32)
        assert onepath.matmul(v, v, out=out) is out
        # a batch of vector products stays an array
        assert type(onepath.matmul(np.ones((2, n), np.float32)[:, None, :],
                                   np.ones((2, n), np.float32)[:, :, None])) is np.ndarray


# ---- numpy's own matmul tests -------------------------------------------------------------------

try:
    import warnings
    with warnings.catch_warnings():  # numpy's module uses marks registered by numpy's own conftest
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        import numpy._core.tests.test_multiarray as _np_tests  # not shipped by every numpy build
except Exception as exc:  # noqa: BLE001
    _np_tests = None
    _why = f"numpy's test files are not installed ({type(exc).__name__}: {exc})"


if _np_tests is not None:
    class TestNumpyMatmulSuite(_np_tests.TestMatmul):
        """numpy's TestMatmul (numpy/_core/tests/test_multiarray.py) with onepath.matmul."""
        matmul = staticmethod(onepath.matmul)
else:
    def test_numpy_matmul_suite():
        pytest.skip(_why)


# ---- issue 12, fault 1: the numpy paths return the docstrings' numpy expressions ---------------

DTYPES = [np.float16, np.float32, np.float64, np.complex64, np.complex128, np.int8, np.int32,
          np.int64, np.bool_, object]
ACTS = ["relu", "gelu", "gelu_tanh", "silu"]


def _vals(shape, dt):
    x = RNG.integers(-3, 4, size=shape)
    if dt is np.bool_:
        return x > 0
    if dt is object:
        return x.astype(object)
    return x.astype(dt) + (0.25 if np.dtype(dt).kind in "fc" else 0)


def _same(got, want):
    assert type(got) is type(want)
    assert np.result_type(got) == np.result_type(want)
    assert np.shape(got) == np.shape(want)
    if np.result_type(want) == object:
        assert all(g == w for g, w in zip(np.ravel(got), np.ravel(want)))
    else:
        np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_matmul_numpy_paths_exact(dt):
    for sa, sb in [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((2, 3, 4), (4, 5))]:
        a, b = _vals(sa, dt), _vals(sb, dt)
        if np.dtype(dt) == np.float32:
            assert_gemm_close(onepath.matmul(a, b), a, b)
        else:
            _same(onepath.matmul(a, b), np.matmul(a, b))


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_linear_numpy_paths_exact(dt):
    x, w = _vals((3, 4), dt), _vals((2, 4), dt)
    biases = [None, _vals((2,), dt), _vals((1,), dt), _vals((), dt)]
    if np.dtype(dt) == np.float32:
        for bias in biases:
            ref = x.astype(np.float64) @ w.astype(np.float64).T + (0 if bias is None else bias)
            np.testing.assert_allclose(onepath.linear(x, w, bias), ref, rtol=1e-6)
        return
    for bias in biases:
        want = x @ w.T if bias is None else x @ w.T + bias
        _same(onepath.linear(x, w, bias), want)
        for act in ACTS:
            if want.dtype in (np.float16, np.float32, np.float64):
                z = want.astype(np.float64)
                ref = {"relu": lambda: np.maximum(want, 0),
                       "gelu": lambda: (0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))).astype(want.dtype),
                       "gelu_tanh": lambda: (0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))).astype(want.dtype),
                       "silu": lambda: (z / (1 + np.exp(-z))).astype(want.dtype)}[act]()
                _same(onepath.linear(x, w, bias, activation=act), ref)
            else:
                with pytest.raises(TypeError, match=str(want.dtype)):
                    onepath.linear(x, w, bias, activation=act)


@pytest.mark.parametrize("shape", [(1, 5, 3), (4, 17, 9), (5, 17, 9), (8, 64, 40), (11, 40, 70)])
def test_small_linear_prepacked_transposed_copy(level, shape):
    """A small float32 linear on a PackedWeight of more than NT_MAX_M rows runs the small kernel's
    nn form on the weight's transposed copy (``small_b``: made on first use, from the snapshot),
    fewer the nt form on the raw weight; through the fast entry (2-D C-contiguous x) and the
    checked one (3-D, strided and Fortran-order x, bias, activation)."""
    from test_linear import _ref
    m, k, n = shape
    x, w, bias = rand(m, k), rand(n, k) / math.sqrt(k), rand(n)
    p = onepath.prepack(w)
    assert p._wt is None
    w0 = w.copy()
    w[...] = 7.0  # the packed copy is a snapshot: so is its transposed copy
    for xx in (x, x.reshape(1, m, k), rand(m, 2 * k)[:, ::2], np.asfortranarray(x)):
        for bb, act in ((None, None), (bias, "gelu")):
            got = onepath.linear(xx, p, bb, activation=act)
            ref = _ref(np.asarray(xx).reshape(m, k), w0, bb, act).reshape(xx.shape[:-1] + (n,))
            np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5 * math.sqrt(k))
    assert (p._wt is not None) == (m > _small.NT_MAX_M)
    assert np.array_equal(p.small_b(), w0.T) and p.small_b().flags.c_contiguous


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("lead", [(1, 2), (3,), (0, 2)])
def test_linear_zero_in_features_any_rank(lead, packed):
    """in_features 0: bias (or zeros) broadcast, as numpy's ``x @ w.T + b``, for any rank of x
    (reshape(-1, 0) is ambiguous and raised before)."""
    x, w, b = np.zeros(lead + (0,), np.float32), np.zeros((3, 0), np.float32), rand(3)
    wt = onepath.prepack(w) if packed else w
    got = onepath.linear(x, wt, b)
    assert got.shape == lead + (3,) and np.array_equal(got, np.broadcast_to(b, lead + (3,)))
    assert onepath.linear(x, wt).shape == lead + (3,)


def test_linear_issue_examples():
    r = onepath.linear(np.array([[0.0]]), np.array([[1.0]]), np.array([0.1]))
    assert r.dtype == np.float64 and r[0, 0] == 0.1
    r = onepath.linear(np.array([[0.0]]), np.array([[1.0]]), np.array([1e-40]))
    assert r[0, 0] == 1e-40
    c = np.array([1 + 2j, 3j, 1])
    r = onepath.linear(np.zeros((1, 2), complex), np.zeros((3, 2), complex), c)
    np.testing.assert_array_equal(r[0], c)
    r = onepath.linear(np.array([[2**40 + 1]]), np.array([[1]]), np.array([2**30 + 1]))
    assert r.dtype == np.int64 and r[0, 0] == 1100585369602
    h = np.float16
    r = onepath.linear(np.ones((1, 2), h), np.ones((3, 2), h), np.ones(3, h))
    assert r.dtype == np.float16


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["conv2d", "conv1d"])
def test_conv_dtypes(dt, op):
    nd = 2 if op == "conv2d" else 1
    x = _vals((1, 3) + (6,) * nd, dt)
    w = _vals((4, 3) + (3,) * nd, dt)
    b = _vals((4,), dt)
    fn = getattr(onepath, op)
    name = np.dtype(dt).name
    if name == "float32":
        assert fn(x, w, b, padding=1).dtype == np.float32
        return
    if name != "float64":
        with pytest.raises(TypeError, match=name):
            fn(x, w, b, padding=1)
        return
    for act in [None] + ACTS:
        got = fn(x, w, b, padding=1, activation=act)
        x4 = x if nd == 2 else x[:, :, None, :]
        w4 = w if nd == 2 else w[:, :, None, :]
        pads = ((1, 1), (1, 1)) if nd == 2 else ((0, 0), (1, 1))
        want = reference_conv2d(x4, w4, b, (1, 1), pads, (1, 1), 1, act)
        if nd == 1:
            want = want[:, :, 0, :]
        _same(got, want)


# ---- issue 12, fault 6: small API gaps -------------------------------------------------------------

def test_linear_bias_broadcasts_like_torch(level):
    x, w = rand(3, 8), rand(5, 8)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    for bias in (np.float32(0.5), np.array(0.5, np.float32), np.array([0.5], np.float32), 0.5):
        np.testing.assert_allclose(onepath.linear(x, w, bias), ref + 0.5, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"\(5,\), \(1,\) or \(\)"):
        onepath.linear(x, w, np.ones(2, np.float32))


def test_packed_weight_as_right_operand_of_at():
    x, w = rand(3, 8), rand(5, 8)
    p = onepath.prepack(w)
    np.testing.assert_allclose(x @ p, onepath.linear(x, w), rtol=1e-6)
    with pytest.raises(TypeError, match="PackedWeight"):
        np.matmul(x, p)
    with pytest.raises(TypeError):
        p @ x  # noqa: B018


def test_string_options_any_case():
    x, w = rand(1, 3, 6, 6), rand(4, 3, 3, 3)
    a = onepath.conv2d(x, w, padding="SAME", activation="ReLU", layout="nchw")
    b = onepath.conv2d(x, w, padding="same", activation="relu", layout="NCHW")
    np.testing.assert_array_equal(a, b)
    x2, w2 = rand(2, 6), rand(3, 6)
    np.testing.assert_array_equal(onepath.linear(x2, w2, activation="SILU"),
                                  onepath.linear(x2, w2, activation="silu"))
    with pytest.raises(ValueError, match="any letter case"):
        onepath.linear(x2, w2, activation="swish")


def test_nhwc_layout_given_nchw_data_names_the_layout():
    x, w = rand(1, 3, 6, 6), rand(4, 3, 3, 3)
    with pytest.raises(ValueError, match=r"layout='NHWC' reads the input as \(N, H, W, C\)"):
        onepath.conv2d(x, w, layout="NHWC")
    with pytest.raises(ValueError, match=r"layout='NLC'"):
        onepath.conv1d(rand(1, 3, 6), rand(4, 3, 3), layout="NLC")


# ---- the calls bench suite -----------------------------------------------------------------------

def test_calls_suite_prints_microseconds_per_call(monkeypatch):
    import io

    from onepath.bench import calls_suite, cli
    monkeypatch.setattr(calls_suite, "_torch", lambda: None)  # torch's import alone takes seconds
    buf = io.StringIO()
    d = cli.run(threads=1, quick=True, suites=["calls"], shapes=[4, 16], repeat=1, min_time=0.001,
                peak=False, progress=False, out=buf)
    text = buf.getvalue()
    assert "onepath us" in text and "numpy us" in text and "x numpy" in text
    names = [r["name"] for r in d["results"]]
    assert names[:2] == ["matmul 4x4x4", "matmul 16x16x16"] and any("prepacked" in n for n in names)
    assert all(r["check_ok"] in (None, True) for r in d["results"])
    assert d["results"][0]["kernel"].startswith("gemm_f32_small_")


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (4, 4, 4), (7, 19, 33), (9, 64, 40), (32, 40, 48)])
def test_small_bfloat16_matmul(level, m, k, n, caplog, verbose_on):
    a, b = rand(m, k).astype(BF16), rand(k, n).astype(BF16)
    with caplog.at_level(logging.INFO, logger="onepath"):
        r32 = onepath.matmul(a, b, dtype=np.float32)
        r16 = onepath.matmul(a, b)
    assert r32.dtype == np.float32 and r16.dtype == BF16
    assert_gemm_close(r32, a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(r16.view(np.uint16), r32.astype(BF16).view(np.uint16))  # one rounding
    row = _small.row_for("matmul", level, "bfloat16")
    assert f"matmul,bf16:bf16:bf16,{row.level},{row.name}" in caplog.text
    lib = load(row.level)
    assert lib.ffi.string(lib.lib.op_gemm_bf16_small_name()).decode() == row.name


@pytest.mark.parametrize("threads", [1, 2])
def test_nt_form_limits(level, threads, caplog, verbose_on, monkeypatch):
    """Past this host's NT_DOTS_LIMITS (here a made-up 1000) at one thread, a float32 nt-form
    product the small kernel would take as dot products (linear; matmul with B = W.T; fewer than
    NT_NN's rows) runs the packed GEMM; its transposed nn form (from NT_NN's rows), the nn form
    itself, and every product at two threads keep LIMITS (and the thin rule). Every answer close."""
    from onepath.dispatch.cpu import probe
    row = _small.row_for("matmul", level)
    monkeypatch.setitem(_small.NT_DOTS_LIMITS, (probe().uarch, row.level), 1000)
    _small.reset()
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        mn = _small.NT_NN.get(row.level, (16, 0))[0]
        for m, k in ((3, 20), (2, 20), (1, 20), (mn, 20), (mn, 4)):
            x, w = rand(m, k), rand(20, k)
            dots = _small.nt_dots(m, k, row.level)
            small = threads > 1 or m * 20 * k <= 1000 or not dots
            for name, got, want in (("linear", lambda: onepath.linear(x, w), x @ w.T),
                                    ("matmul", lambda: onepath.matmul(x, w.T), x @ w.T),
                                    ("nn", lambda: onepath.matmul(x, w.T.copy()), x @ w.T)):
                caplog.clear()
                with caplog.at_level(logging.INFO, logger="onepath"):
                    y = got()
                took_small = row.name in caplog.text
                assert took_small is (small or name == "nn"), (m, k, name, caplog.text)
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    finally:
        onepath.set_num_threads(old)
        monkeypatch.undo()
        _small.reset()


@pytest.mark.parametrize("threads", [1, 2])
def test_batched_small_products(level, threads, caplog, verbose_on):
    """Batched float32 products whose core product is small run the small kernel on every entry
    (op_gemm_f32_small_batch): broadcast batch axes (a 2-D operand, stride-0 and size-1 axes),
    several batch axes, B = W.T entries, a size-1 core axis of any stride, and batch axes no single
    stride walks (copied first, each core keeping its order). Each entry has its 2-D call's bits
    (B = W.T entries: the nt form's), at 1 and 2 threads alike."""
    row = _small.row_for("matmul", level)
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    rng = np.random.default_rng(7)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    wt = r(5, 17, 30).transpose(0, 2, 1)                      # entries B = W.T
    cases = [(r(8, 20, 30), r(8, 30, 17), True), (r(6, 20, 30), r(30, 17), True),
             (r(20, 30), r(4, 30, 17), True), (r(2, 3, 9, 30), r(2, 3, 30, 5), True),
             (np.broadcast_to(r(1, 20, 30), (5, 20, 30)), r(5, 30, 17), True),
             (r(5, 20, 30), wt, True), (r(2, 3, 9, 30), r(3, 30, 5), True),
             (r(5, 1, 20, 30), r(1, 4, 30, 17), True),
             (r(3, 4, 20, 30).transpose(1, 0, 2, 3), r(4, 3, 30, 17), True),
             (r(3, 5, 30), r(3, 1, 30).transpose(0, 2, 1), True),   # N 1, its stride 30
             (r(2, 3, 9, 30).transpose(1, 0, 2, 3), r(3, 2, 17, 30).transpose(0, 1, 3, 2), True)]
    try:
        for a, b, batched_small in cases:
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                y = onepath.matmul(a, b)
            assert (row.name in caplog.text) is batched_small, (a.shape, b.shape, caplog.text)
            want = np.matmul(a.astype(np.float64), b.astype(np.float64))
            assert y.shape == want.shape and y.dtype == np.float32
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
            if batched_small:  # every entry: its own 2-D call's bits
                ba = np.broadcast_to(a, y.shape[:-2] + a.shape[-2:])
                bb = np.broadcast_to(b, y.shape[:-2] + b.shape[-2:])
                for idx in np.ndindex(y.shape[:-2]):
                    one = onepath.matmul(np.ascontiguousarray(ba[idx]), bb[idx])
                    assert np.array_equal(y[idx].view(np.uint32), one.view(np.uint32)), idx
    finally:
        onepath.set_num_threads(old)


def test_small_kernel_past_limits_on_several_threads(level, small_mt_on, caplog, verbose_on):
    """With more than one thread, a product past LIMITS' first value and within its second (B within
    B_MAX) takes the threaded small kernel below MT_GEMM_ONE (``mt_fits``), with the bits of its
    one-thread call; larger ones and batched ones keep the packed GEMM. Results against the
    float64 product."""
    row = _small.row_for("matmul", level)
    lim, lim1t = _small.limits(row.level)   # (LIMITS, or this host's LIMITS_UARCH row)
    old = onepath.get_num_threads()
    # (the small kernel past LIMITS' first value at avx512_core's small row: LIMITS' two values
    # are equal at the other levels)
    cases = [(128, 384, 64, "matmul", True), (128, 384, 64, "linear", True),
             (256, 256, 128, "matmul", False), (100, 200, 150, "matmul_t", True),
             (1024, 48, 64, "matmul", True), (150, 160, 160, "linear", True),
             (256, 384, 32, "matmul", True),   # (32 columns: row ranges on the pool)
             (1024, 128, 128, "matmul", False), (1024, 128, 128, "linear", False)]
    try:
        for m, k, n, op, past in cases:
            x, w = rand(m, k), rand(n, k) / math.sqrt(k)
            call = {"matmul": lambda: onepath.matmul(x, np.ascontiguousarray(w.T)),
                    "matmul_t": lambda: onepath.matmul(x, w.T),
                    "linear": lambda: onepath.linear(x, w)}[op]
            onepath.set_num_threads(1)
            one = call()
            onepath.set_num_threads(2)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                two = call()
            assert_gemm_close(two, x, w.T)
            mnk = m * n * k
            small = past and lim < lim1t
            name = _small.row_for("linear" if op == "linear" else "matmul", level).name
            assert mnk > lim and (name in caplog.text) == small, (m, k, n, op, caplog.text)
            if small:
                assert np.array_equal(one.view(np.uint32), two.view(np.uint32)), (m, k, n, op)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onepath"):
            onepath.matmul(rand(2, 128, 384), rand(2, 384, 64))   # batched: LIMITS as before
        assert row.name not in caplog.text, caplog.text
    finally:
        onepath.set_num_threads(old)


def test_one_column_b_same_bits_whatever_came_before(level):
    """A B of one column (or one row) is both C- and F-contiguous: the same call gives the same
    bits whether the fast entry of matmul was filled by an earlier call or not (it took the nt
    form while the entry was empty, the nn form after; found by the review of 2026-12-06)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((70, 24)).astype(np.float32)
    for b in (rng.standard_normal((24, 1)).astype(np.float32),
              rng.standard_normal((1, 9)).astype(np.float32)):
        x = a if b.shape[0] == 24 else a[:, :1]
        _small.fast_matmul.clear()
        first = onepath.matmul(x, b)
        onepath.matmul(x, np.ones((x.shape[1], 2), np.float32))   # fills the fast entry
        again = onepath.matmul(x, b)
        assert np.array_equal(first.view(np.uint32), again.view(np.uint32)), b.shape
        assert_gemm_close(again, x, b)


def test_one_row_stream_same_bits_as_tiles(level):
    """One row of C wider than a tile (kernels/gemm_small.c op_small_row: B's rows streamed in
    blocks across the whole row) gives the bits of the 32-column tiles, which still take every
    product of at most 32 columns: each strip of 32 computed alone, at 1 and 3 threads, A's row
    contiguous or strided, K across several row blocks, ragged column tails (a tail of 1 to 4
    columns computed alone takes its own form, op_small_dot or AVX2's op_small_row_narrow: not
    compared)."""
    mod = load(_small.row_for("matmul", level).level)
    ffi, lib = mod.ffi, mod.lib
    rng = np.random.default_rng(11)
    for k, n in ((1, 33), (5, 100), (64, 65), (65, 200), (300, 1000), (130, 47), (7, 4096)):
        for csa in (1, 3):
            a = rng.standard_normal(k * csa).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            want = a[::csa].astype(np.float64) @ b.astype(np.float64)
            rows = []
            for t in (1, 3):
                c = np.full(n, np.nan, np.float32)
                assert lib.op_gemm_f32_small_mt(1, n, k, ffi.from_buffer(a), k * csa, csa,
                                                ffi.from_buffer(b), n, 1, ffi.from_buffer(c), n, 1,
                                                ffi.NULL, t)
                np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * math.sqrt(k))
                rows.append(c)
            strips = np.full(n, np.nan, np.float32)
            for j in range(0, n, 32):
                w = min(32, n - j)
                bj = np.ascontiguousarray(b[:, j:j + w])
                cj = np.full(w, np.nan, np.float32)
                assert lib.op_gemm_f32_small(1, w, k, ffi.from_buffer(a), k * csa, csa,
                                             ffi.from_buffer(bj), w, 1, ffi.from_buffer(cj), w, 1,
                                             ffi.NULL)
                strips[j:j + w] = cj
            same = slice(None) if n % 32 > 4 or n % 32 == 0 or csa != 1 else slice(0, n - n % 32)
            for c in rows:
                assert np.array_equal(c[same].view(np.uint32), strips[same].view(np.uint32)), (
                    k, n, csa)


@pytest.mark.parametrize("threads", [1, 2])
def test_vector_operands_take_the_2d_call(level, threads):
    """A matrix times a vector and a vector times a matrix (matmul's fast entry, 2026-12-06): the
    same bits as the 2-D product with the vector as a (K, 1) or (1, K) matrix, whether the fast
    entry was filled or not, a 1-D result; a strided vector, a depth mismatch, K = 0 and empty
    results as numpy."""
    rng = np.random.default_rng(5)
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        for m, k in ((1, 1), (3, 7), (70, 24), (300, 129), (1000, 64), (64, 2048)):
            a = rng.standard_normal((m, k)).astype(np.float32)
            v = rng.standard_normal(k).astype(np.float32)
            u = rng.standard_normal(m).astype(np.float32)
            for fill in (False, True):
                _small.fast_matmul.clear()
                if fill:
                    onepath.matmul(a[:2, :2].copy(), a[:2, :2].copy())
                av, ua = onepath.matmul(a, v), onepath.matmul(u, a)
                assert av.shape == (m,) and ua.shape == (k,) and av.dtype == ua.dtype == np.float32
                col, row = onepath.matmul(a, v[:, None])[:, 0], onepath.matmul(u[None, :], a)[0]
                assert np.array_equal(av.view(np.uint32), col.view(np.uint32)), (m, k, fill)
                assert np.array_equal(ua.view(np.uint32), row.view(np.uint32)), (m, k, fill)
                assert_gemm_close(av[:, None], a, v[:, None])
                assert_gemm_close(ua[None, :], u[None, :], a)
        a = rng.standard_normal((40, 16)).astype(np.float32)
        w = rng.standard_normal(32).astype(np.float32)
        assert_gemm_close(onepath.matmul(a, w[::2])[:, None], a, w[::2, None])   # strided vector
        assert_gemm_close(onepath.matmul(w[::-2][:16], a.T)[None, :], w[::-2][None, :16], a.T)
        with pytest.raises(ValueError):
            onepath.matmul(a, w)                       # K 16 against 32: numpy's error
        with pytest.raises(ValueError):
            onepath.matmul(w, a)
        z = onepath.matmul(np.ones((5, 0), np.float32), np.ones(0, np.float32))
        assert z.shape == (5,) and not z.any()
        assert onepath.matmul(np.ones((0, 4), np.float32), np.ones(4, np.float32)).shape == (0,)
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("bias_axis", [None, 1, 0])
def test_small_matvec_turned(level, bias_axis):
    """One column with A's rows and B's column contiguous runs as C^T = B^T A^T (one row of dot
    products; kernels/gemm_small.c OP_SMALL_MATVEC), the bias moved to the other axis: against the
    float64 product with a bias along C's columns (one value) or rows (m values) and a relu, at 1
    to 3 threads, the same bits at each; and through matmul (a vector, a (k, 1) column) and
    linear (one output feature)."""
    mod = load(_small.row_for("matmul", level).level)
    ffi, lib = mod.ffi, mod.lib
    rng = np.random.default_rng(3)
    for m, k in ((2, 5), (70, 24), (300, 129), (1000, 64)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, 1)).astype(np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        epi, bias = ffi.NULL, None
        if bias_axis is not None:
            bias = rng.standard_normal(1 if bias_axis else m).astype(np.float32)
            epi = ffi.new("op_epilogue *")
            epi.bias = ffi.cast("const float *", bias.ctypes.data)
            epi.bias_stride, epi.bias_axis, epi.act = 1, bias_axis, 1  # relu
            want = np.maximum(want + (bias if bias_axis else bias[:, None]), 0)
        outs = []
        for t in (0, 1, 2, 3):
            c = np.full((m, 1), np.nan, np.float32)
            args = (m, 1, k, ffi.from_buffer(a), k, 1, ffi.from_buffer(b), 1, 1,
                    ffi.from_buffer(c), 1, 1, epi)
            assert (lib.op_gemm_f32_small(*args) if t == 0 else lib.op_gemm_f32_small_mt(*args, t))
            np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * math.sqrt(k))
            outs.append(c)
        for c in outs[1:]:
            assert np.array_equal(c.view(np.uint32), outs[0].view(np.uint32)), (m, k)
        if bias_axis is None:
            assert_gemm_close(onepath.matmul(a, b[:, 0]), a, b[:, 0])
            assert_gemm_close(onepath.matmul(a, b), a, b)
        elif bias_axis:
            y = onepath.linear(a, b.T.copy(), bias, activation="relu")
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * math.sqrt(k))


def test_batched_small_with_few_entries(small_mt_on, caplog, verbose_on):
    """Fewer entries than threads: each entry's columns over the threads (op_gemm_f32_small_mt),
    the same bits as one thread; a batch of thin products larger than LIMITS keeps the GEMM (the
    thin rule is for 2-D calls)."""
    old = onepath.get_num_threads()
    a, b = rand(1, 64, 96), rand(1, 96, 128)   # within every level's LIMITS (avx2: 112^3)
    try:
        onepath.set_num_threads(1)
        one = onepath.matmul(a, b)
        onepath.set_num_threads(2)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onepath"):
            two = onepath.matmul(a, b)
            thin = onepath.matmul(rand(2, 16, 1024), rand(2, 1024, 1024))
        assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
        lines = caplog.text.splitlines()
        assert "gemm_f32_small" in lines[0] and "gemm_f32_small" not in lines[1], lines
        assert thin.shape == (2, 16, 1024)
    finally:
        onepath.set_num_threads(old)


def test_nt_transposed_form_on_a_small_thread_stack(level):
    """The transposed nt form's strip lives on the heap: a 16-row linear runs in a thread with a
    64 KiB stack (it overflowed one with the strip on the stack)."""
    import threading
    x, w = rand(16, 512), rand(64, 512)
    out = {}

    def run():
        out["y"] = onepath.linear(x, w)
    old = threading.stack_size(65536)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    np.testing.assert_allclose(out["y"], x @ w.T, rtol=1e-4, atol=1e-4)


def test_nt_form_with_strided_output_rows_counts_as_dot_products(monkeypatch, caplog, verbose_on):
    """matmul(x, W.T, out=) whose out rows are strided runs the dot products at any depth, so
    NT_DOTS_LIMITS (here a made-up 1000) sends it to the GEMM at one thread."""
    from onepath.dispatch.cpu import probe
    row = _small.row_for("matmul", onepath.isa())
    monkeypatch.setitem(_small.NT_DOTS_LIMITS, (probe().uarch, row.level), 1000)
    _small.reset()
    old = onepath.get_num_threads()
    onepath.set_num_threads(1)
    try:
        x, w = rand(32, 20), rand(20, 20)
        out = np.zeros((32, 40), np.float32)[:, ::2]
        with caplog.at_level(logging.INFO, logger="onepath"):
            onepath.matmul(x, w.T, out=out)
        assert row.name not in caplog.text, caplog.text
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)
    finally:
        onepath.set_num_threads(old)
        monkeypatch.undo()
        _small.reset()


def test_neither_form_takes_the_small_kernel_only_when_tiny(level, caplog, verbose_on):
    """Products in neither the nn nor the nt form (A and B column-major; C's rows strided) run the
    small kernel's reference loop only up to ANY_MAX, the packed GEMM above; answers close."""
    row = _small.row_for("matmul", level)
    for s in (8, 64):
        x, b = rand(s, s), rand(s, s)
        xt, bt = np.asfortranarray(x), np.asfortranarray(b)
        out = np.zeros((s, 2 * s), np.float32)[:, ::2]
        for got in (lambda: onepath.matmul(xt, bt), lambda: onepath.matmul(x, b, out=out)):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                y = got()
            assert (row.name in caplog.text) is (s ** 3 <= _small.ANY_MAX), (s, caplog.text)
            np.testing.assert_allclose(y, x @ b, rtol=1e-5, atol=1e-5)


def test_nt_nn_constants_match_the_kernel(level):
    """ops/_small.py's NT_NN mirrors gemm_small.c's rule (op_gemm_f32_small_nt_nn) at every
    level."""
    row = _small.row_for("matmul", level)
    lib = load(row.level).lib
    mn, kx = _small.NT_NN.get(row.level, (16, 512))
    for m, k in ((mn - 1, 8), (mn, 8), (mn, kx), (mn, kx + 1), (1, 1), (200, 512), (200, 600),
                 (200, 4096), (200, 4097)):
        nn = bool(lib.op_gemm_f32_small_nt_nn(m, k))
        assert nn is not _small.nt_dots(m, k, row.level), (m, k)


@pytest.mark.parametrize("threads", [1, 2])
def test_nt_form_transposed_strips(level, threads, small_mt_on):
    """The nt form's transposed-strip route (from NT_NN's rows, K up to its depth: 16 and 512 at
    avx512_core, 12 and 4096 at avx2) against float64 at every strip and K edge (N 1..70, K 1..the
    depth and one past it), with bias and activation, through linear and matmul with B = W.T; the
    same bits at 1 and 2 threads."""
    mn, kx = _small.NT_NN.get(_small.row_for("matmul", level).level, (16, 512))
    old = onepath.get_num_threads()
    try:
        for m, k, n in ((mn, 1, 1), (mn, 15, 17), (mn + 1, 16, 31), (24, 17, 32), (33, 100, 33),
                        (40, 512, 70), (mn, kx, 20), (mn, kx + 1, 20), (64, 64, 64), (mn, 9, 7)):
            x, w, bias = rand(m, k), rand(n, k), rand(n)
            res = []
            for t in (1, threads):
                onepath.set_num_threads(t)
                y = onepath.linear(x, w, bias, activation="relu")
                z = onepath.matmul(x, w.T)
                ref = x.astype(np.float64) @ w.T.astype(np.float64)
                np.testing.assert_allclose(z, ref, rtol=2e-5, atol=2e-5 * np.sqrt(k))
                np.testing.assert_allclose(y, np.maximum(ref + bias, 0), rtol=2e-5,
                                           atol=2e-5 * np.sqrt(k))
                res.append((y, z))
            for a_, b_ in zip(*res):
                assert np.array_equal(a_.view(np.uint32), b_.view(np.uint32))
    finally:
        onepath.set_num_threads(old)


def test_bfloat16_small_limits_per_level(level, caplog, verbose_on):
    """Past its level's BF16_LIMITS (M*N*K, from that many rows on) a bfloat16 matmul runs the
    level's bfloat16 GEMM instead of the small kernel; within them, and with fewer rows up to
    LIMITS, the small kernel. Both answers close to the float64 product."""
    lim = _small.BF16_LIMITS.get(level)
    if lim is None:
        pytest.skip(f"no BF16_LIMITS row at {level}: LIMITS alone decide there")
    mnk, rows = lim
    side = round(mnk ** (1 / 3))
    small_row = _small.row_for("matmul", level, "bfloat16")
    kn = 256
    while rows * kn * kn <= mnk:  # (few rows: a K and N that take the product past the limit)
        kn *= 2
    cases = [((side, side, side), True), ((side + 16,) * 3, False), ((rows, kn, kn), False)]
    if rows > 1:  # (a row from 1 row on: every row count)
        cases.append(((rows - 1, kn, kn), True))
    for (m, k, n), small in cases:
        assert _small.use_small(m * n * k, "matmul", "bfloat16", k * n, m) is small, (m, k, n)
        a, b = rand(m, k).astype(BF16), rand(k, n).astype(BF16)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onepath"):
            r32 = onepath.matmul(a, b, dtype=np.float32)
        assert (small_row.name in caplog.text) is small, (m, k, n, caplog.text)
        assert_gemm_close(r32, a.astype(np.float32), b.astype(np.float32))
    with _small.on():  # onepath.dask's blocks of a small problem: the small kernel at any size
        assert _small.use_small((side + 16) ** 3, "matmul", "bfloat16", (side + 16) ** 2, side + 16)


@pytest.mark.parametrize("bdt", [np.float64, np.complex64, np.int64])
def test_linear_bias_of_another_dtype_promotes_as_numpy(bdt):
    """float32 x and weight with a float64 / complex / integer bias: numpy's expression, exactly."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 5
    b = (np.arange(4) * 1e300 if bdt is np.float64 else np.arange(4) + (1j if bdt is np.complex64 else 0)).astype(bdt)
    want = x @ w.T + b
    got = onepath.linear(x, w, b)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("repro", [False, True])
@pytest.mark.parametrize("bias", [np.array([1 + 2j]), np.array([0.1]), np.array([3]), np.float32(1), 1.5, 3,
                                  1j, np.array([1.5], np.float32), np.array(2.5, np.float16)])
def test_linear_bias_kinds_in_both_modes(bias, repro):
    """Every kind of bias gives numpy's ``x @ w.T + bias`` (value and dtype) in both modes: a Python
    scalar stays weak, (1,) and 0-d broadcast, other dtypes promote."""
    x = np.array([[1.0, 2.0]], np.float32)
    w = np.ones((3, 2), np.float32)
    want = x @ w.T + bias
    with onepath.reproducible(repro):
        got = onepath.linear(x, w, bias)
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)


def test_reproducible_vector_product_is_numpys_scalar():
    with onepath.reproducible():
        r = onepath.matmul(np.ones(3, np.float32), np.ones(3, np.float32))
    assert type(r) is np.float32 and r == 3


@pytest.mark.parametrize("nb, m, k, n",
                         [(3, 5, 7, 9), (8, 64, 64, 64), (2, 1, 1, 1), (4, 33, 17, 1),
                          (4, 16, 32, 16), (2, 12, 64, 100)])
def test_batched_3d_fast_path_same_bits(level, monkeypatch, nb, m, k, n):
    # matmul's fast path for C-contiguous 3-D float32 operands (ops/matmul.py, _batch3_fast) makes
    # the call the general path makes (out= takes the general path): the same bits
    from onepath import _repro_mode
    from onepath.ops import matmul as mm
    monkeypatch.setattr(_repro_mode, "_ever", False)  # (an earlier test's mode empties the entry)
    _small.fast_matmul.clear()
    _small.bound("matmul")   # fills the fast entry of the level in force
    rng = np.random.default_rng(nb * m + k * n)
    a = rng.standard_normal((nb, m, k)).astype(np.float32)
    b = rng.standard_normal((nb, k, n)).astype(np.float32)
    # B C-contiguous, and B's columns contiguous (W.transpose(0, 2, 1), attention's q @ k^T: the nt
    # form): the fast entry gives the bits of the general path's (its out= entry)
    bt = b.transpose(0, 2, 1).copy().transpose(0, 2, 1)
    for bb, nt_k in ((b, None), (bt, k if k > 1 and n > 1 else None)):
        general = onepath.matmul(a, bb, out=np.empty((nb, m, n), np.float32))
        fast = mm._batch3_fast(a, bb)
        if _small.use_small_batched(m * n * k, n * k, m, nt_k):
            assert fast is not None
            assert np.array_equal(fast.view(np.uint32), general.view(np.uint32))
        else:
            assert fast is None
        assert np.array_equal(onepath.matmul(a, bb).view(np.uint32), general.view(np.uint32))
        np.testing.assert_allclose(general, np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-4)
    assert mm._batch3_fast(a, b[:1]) is None                   # batch broadcast: general path
    wide = np.zeros((nb, k, 2 * n), np.float32)
    wide[:, :, :n] = b
    if k > 1:  # rows strided (a column slice of a wider B): the general path
        assert mm._batch3_fast(a, wide[:, :, :n]) is None


@pytest.mark.parametrize("nb, m, k, n", [(3, 5, 7, 9), (40, 48, 48, 48), (9, 100, 70, 90)])
def test_small_batch_same_bits_at_any_thread_count(level, nb, m, k, n):
    """op_gemm_f32_small_batch splits whole entries over the threads (from 2^22 multiply-adds in
    all, OP_SMALL_MT_BIG, four ranges a thread): every entry's bits are the one-thread call's at
    1-5 threads, B C-ordered or W.transpose(0, 2, 1), the output NaN-filled first."""
    mod = load(_small.row_for("matmul", level).level)
    ffi, lib = mod.ffi, mod.lib
    a, b, w = rand(nb, m, k), rand(nb, k, n), rand(nb, n, k)
    for bb, rsb, csb in ((b, n, 1), (w, 1, k)):
        outs = []
        for t in (1, 2, 3, 5):
            c = np.full((nb, m, n), np.nan, np.float32)
            lib.op_gemm_f32_small_batch(nb, m, n, k, ffi.cast("float *", a.ctypes.data), m * k, k, 1,
                                        ffi.cast("float *", bb.ctypes.data), k * n, rsb, csb,
                                        ffi.cast("float *", c.ctypes.data), m * n, n, 1, t)
            outs.append(c)
        assert not np.isnan(outs[0]).any()
        for c in outs[1:]:
            assert np.array_equal(c.view(np.uint32), outs[0].view(np.uint32))
        ref = np.matmul(a.astype(np.float64), bb.astype(np.float64) if csb == 1
                        else bb.transpose(0, 2, 1).astype(np.float64))
        np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-3)


def test_uarch_limits_apply_to_their_host_only(monkeypatch):
    """LIMITS_UARCH's row replaces LIMITS' value for its microarchitecture's host, looked up at the
    first use (no probe at import); other hosts keep LIMITS; LIMITS switched off (below 0) stays
    off."""
    from types import SimpleNamespace
    from onepath.dispatch import cpu
    from onepath.ops import _small
    zen3 = _small.LIMITS_UARCH[("zen3", "avx2")]
    monkeypatch.setattr(_small, "LIMITS", {"avx2": (112 ** 3, 112 ** 3)})
    for uarch, want in (("zen3", zen3), ("zen4", (112 ** 3, 112 ** 3))):
        monkeypatch.setattr(cpu, "probe", lambda u=uarch: SimpleNamespace(uarch=u))
        _small._uarch_limits.clear()
        assert _small.limits("avx2") == want, uarch
    monkeypatch.setattr(_small, "LIMITS", {"avx2": (-1, -1)})
    assert _small.limits("avx2") == (-1, -1)
    _small._uarch_limits.clear()


def test_uarch_limits_within_the_gemm_one_thread_rule():
    """A LIMITS_UARCH one-thread limit stays within MT_GEMM_ONE: past it 2 threads take the GEMM
    (mt_fits), so a larger limit would give a product other bits at 1 thread than at 2."""
    from onepath.ops import _small
    for key, (lim, lim1t) in _small.LIMITS_UARCH.items():
        assert lim1t <= max(lim, _small.MT_GEMM_ONE), key


@pytest.mark.parametrize("n", [158, 159, 160])
def test_squares_near_the_limit_same_bits_at_1_and_2_threads(n):
    """On this host's best level, a square product just past MT_GEMM_ONE gives one thread's bits
    at two (the fresh-user review found 159^3 and 160^3 differing with zen3's limit at 160^3).
    AVX-512 hosts run 159^3 on the small kernel at 1 thread up to 256^3 (LIMITS) and on the GEMM
    at 2, by design: checked where the level in force is avx2."""
    if onepath.isa() != "avx2":
        pytest.skip("the avx2 limits (AVX-512's 256^3 one-thread limit changes path by design)")
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal((n, n)).astype(np.float32)
    old = onepath.get_num_threads()
    try:
        onepath.set_num_threads(1)
        one = onepath.linear(a, w)
        onepath.set_num_threads(2)
        two = onepath.linear(a, w)
    finally:
        onepath.set_num_threads(old)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))


def test_off_holds_after_a_small_product(level):
    """``_small.off()`` (onepath.dask's blocks of large problems) runs the packed GEMM also after a
    small product filled matmul's fast entry, with and without ``out``, at any thread count (found
    by a review: the 2-D shortcut took the small kernel inside off())."""
    from onepath.ops import _small
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 64), dtype=np.float32)
    w = rng.standard_normal((64, 173), dtype=np.float32)
    saved = onepath.get_num_threads()
    try:
        onepath.set_num_threads(1)
        with _small.off():
            g = onepath.matmul(x, w)
        onepath.matmul(x, w)   # the small kernel, filling the fast entry
        for t in (1, 2):
            onepath.set_num_threads(t)
            with _small.off():
                assert onepath.matmul(x, w).tobytes() == g.tobytes()
                o = np.empty((5, 173), np.float32)
                onepath.matmul(x, w, out=o)
                assert o.tobytes() == g.tobytes()
    finally:
        onepath.set_num_threads(saved)



def test_same_bits_at_one_and_two_threads_past_the_first_limit(level):
    """Products past LIMITS' first value (within its second) that give no row count (a batched
    matmul, a PackedWeight's linear past NT_MAX_M rows) keep LIMITS' first value at every thread
    count: the same path, so the same bits, at 1 and 2 threads (they took the small kernel at one
    thread and the packed GEMM at two). And x @ W.T with fewer than 8 columns, whose transposed nn
    form needs 8 at avx2: the same bits at 1 and 2 threads where the 2-thread ranges are narrower.
    Every answer close to float64."""
    lim, lim1t = _small.limits(_small.row_for("matmul", level).level)
    if lim < 0 or lim1t <= lim:
        pytest.skip(f"no one-thread extension of LIMITS at {level}")
    k = 1000  # deeper than every KC: the packed GEMM then sums K in blocks, the small kernel not
    m = n = int(round(((lim + lim1t) / 2 / k) ** 0.5))
    assert lim < m * n * k <= lim1t and k * n <= _small.B_MAX
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, m, k), dtype=np.float32)
    b = rng.standard_normal((2, k, n), dtype=np.float32)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    xs, ws = rand(40, 300), rand(36, 300)   # 36 columns: ranges of 32 + 4 at 2 threads
    old = onepath.get_num_threads()
    got = []
    try:
        for t in (1, 2):
            onepath.set_num_threads(t)
            got.append((onepath.matmul(a, b), onepath.linear(x, onepath.prepack(w)),
                        onepath.linear(xs, ws)))
    finally:
        onepath.set_num_threads(old)
    refs = (a.astype(np.float64) @ b, x.astype(np.float64) @ w.T.astype(np.float64),
            xs.astype(np.float64) @ ws.T.astype(np.float64))
    for one, two, ref in zip(got[0], got[1], refs):
        assert one.tobytes() == two.tobytes()
        np.testing.assert_allclose(one, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_vector_dot_and_narrow_b_in_the_small_kernel(level):
    """kernels/gemm_small.c, 2026-12-07: a vector dot product (m = n = 1, both operands contiguous
    along K: op_small_dot's four accumulators) and a row-major B of 2-4 columns from
    OP_SMALL_NARROW_MIN_M (16) rows of the whole call (B's columns copied into rows, the nt form's
    dot tiles): the product at K tails around every vector width, the same bits at 1, 2 and 3
    threads (row ranges) and in row blocks of at least 16 rows (onepath.dask's padded blocks);
    below 16 rows the nn form, also at any thread count."""
    mod = load(_small.row_for("matmul", level).level)
    ffi, lib = mod.ffi, mod.lib
    rng = np.random.default_rng(21)

    def small(a, b, t, rsb=None):
        m, k = a.shape
        n = b.shape[1]
        c = np.full((m, n), np.nan, np.float32)
        assert lib.op_gemm_f32_small_mt(m, n, k, ffi.from_buffer(a), k, 1, ffi.from_buffer(b),
                                        n if rsb is None else rsb, 1, ffi.from_buffer(c), n, 1,
                                        ffi.NULL, t)
        return c

    for k in (1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 4099, 70001):
        a, b = rand(1, k), rand(k, 1)
        dots = [small(a, b, t) for t in (1, 2)]
        assert_gemm_close(dots[0], a, b)
        assert np.array_equal(dots[0].view(np.uint32), dots[1].view(np.uint32)), k
    for n in (2, 3, 4):
        for k in (1, 7, 15, 16, 17, 33, 1000, 65537):   # one row (AVX2: op_small_row_narrow)
            a, b = rand(1, k), rand(k, n)
            runs = [small(a, b, t) for t in (1, 2)]
            assert_gemm_close(runs[0], a, b)
            assert np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32)), (k, n)
        for m, k in ((15, 100), (16, 8), (16, 9), (40, 100), (97, 333), (200, 1000)):
            a, b = rand(m, k), rand(k, n)
            runs = [small(a, b, t) for t in (1, 2, 3)]
            assert_gemm_close(runs[0], a, b)
            for c in runs[1:]:
                assert np.array_equal(runs[0].view(np.uint32), c.view(np.uint32)), (m, k, n)
            if m >= 32:   # two row blocks of at least 16 rows
                h = m // 2
                halves = np.concatenate([small(a[:h].copy(), b, 1), small(a[h:].copy(), b, 1)])
                assert np.array_equal(runs[0].view(np.uint32), halves.view(np.uint32)), (m, k, n)
        # the whole call decides the form, not a thread's range of columns: a last range of 1 to
        # 4 columns (33 to 36 columns at 2 threads) takes the one-thread call's form
        for m in (1, 20):
            a, b = rand(m, 50), rand(50, 32 + n)
            assert np.array_equal(small(a, b, 1).view(np.uint32), small(a, b, 2).view(np.uint32))
        a, v = rand(33, 50), rand(50, 1)   # matrix times vector: C^T, its last range one column
        assert np.array_equal(small(a, v, 1).view(np.uint32), small(a, v, 2).view(np.uint32))
        # a B whose rows are strided (a column slice of a wider matrix)
        a, wide = rand(50, 64), rand(64, 9)
        sl = np.ascontiguousarray(wide[:, :n])
        c = np.full((50, n), np.nan, np.float32)
        assert lib.op_gemm_f32_small_mt(50, n, 64, ffi.from_buffer(a), 64, 1, ffi.from_buffer(wide),
                                        9, 1, ffi.from_buffer(c), n, 1, ffi.NULL, 2)
        assert np.array_equal(c.view(np.uint32), small(a, sl, 1).view(np.uint32)), n


@pytest.mark.parametrize("threads", [1, 2])
def test_vector_dot_and_narrow_b_through_matmul(level, threads):
    """The same products through onepath.matmul on both routes (the small kernel within its
    limits; the packed GEMM's driver past them, whose dot path now takes a row-major B of 2-4
    columns through a copy of its columns: kernels/gemv_f32.c op_dot_narrow): 1-D and 2-D forms of
    a dot product give the same bits, a batch's entries on the route of their 2-D calls those
    calls' bits (also a broadcast B, and entries copied a few at a time past the small limits), row
    blocks the bits of the whole product, an ``out=`` with a column stride (one row: found by the
    review) numpy's placement, and every result is the product."""
    rng = np.random.default_rng(22)
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        for k in (5, 1000, 262144):
            u, v = rand(k), rand(k)
            _small.fast_matmul.clear()
            d = onepath.matmul(u, v)   # the general path (the fast entry empty), then the entry
            assert type(d) is np.float32 and type(onepath.matmul(u, v)) is np.float32
            assert np.array_equal(d.view(np.uint32), onepath.matmul(u, v).view(np.uint32))
            assert np.array_equal(np.float32(d).view(np.uint32),
                                  onepath.matmul(u[None], v[:, None])[0, 0].view(np.uint32))
            w = rand(2 * k)[::2]   # strided: the general path
            assert_gemm_close(np.float32(onepath.matmul(w, v)).reshape(1, 1), w[None], v[:, None])
            assert_gemm_close(np.float32(d).reshape(1, 1), u[None], v[:, None])
            batch = onepath.matmul(np.stack([u, v])[:, None, :], np.stack([v, u])[:, :, None])
            assert np.array_equal(batch[0, 0, 0].view(np.uint32), np.float32(d).view(np.uint32))
            with _small.off():   # the driver's route takes the same dot (gemv_f32.c)
                assert np.array_equal(np.float32(onepath.matmul(u, v)).view(np.uint32),
                                      d.view(np.uint32)), k
        for path in ("small", "gemm"):
            ctx = _small.on() if path == "small" else _small.off()
            with ctx:
                for m, k, n in ((1, 3000, 2), (1, 33, 4), (3, 777, 3), (20, 300, 4),
                                (30, 20, 3), (64, 2048, 2), (300, 129, 3)):
                    a, b = rand(m, k), rand(k, n)
                    c = onepath.matmul(a, b)
                    assert_gemm_close(c, a, b)
                    if m >= 40:
                        h = m // 2
                        halves = np.concatenate([onepath.matmul(a[:h], b),
                                                 onepath.matmul(a[h:], b)])
                        assert np.array_equal(c.view(np.uint32), halves.view(np.uint32)), (path, m)
                    b3 = np.stack([b, b[::-1].copy()])
                    c3 = onepath.matmul(np.stack([a, a]), b3)
                    for i in range(2):
                        assert np.array_equal(c3[i].view(np.uint32),
                                              onepath.matmul(a, b3[i]).view(np.uint32)), (path, m)
                    big = np.full((m, 2 * n + 1), -7.0, np.float32)
                    got = onepath.matmul(a, b, out=big[:, 1::2])
                    assert np.shares_memory(got, big)
                    np.testing.assert_array_equal(big[:, ::2], -7.0)
                    assert_gemm_close(big[:, 1::2], a, b)
        # past the small limits: a batch copied a few entries at a time (16 MiB of copied
        # columns: 3 entries of K 300000 x 4), B broadcast or one per entry
        k, n = 300000, 4
        a, b = rand(7, 2, k), rand(k, n)
        bs = rand(7, k, n)
        for bb in (b, bs):
            c = onepath.matmul(a, bb)
            for i in range(7):
                bi = bb if bb.ndim == 2 else bb[i]
                assert np.array_equal(c[i].view(np.uint32),
                                      onepath.matmul(a[i], bi).view(np.uint32)), (bb.ndim, i)
                assert_gemm_close(c[i], a[i], bi)
    finally:
        onepath.set_num_threads(old)


def test_nn_form_eight_row_tiles_same_bits_as_single_rows(level):
    """kernels/gemm_small.c, 2026-12-07: a column strip of at most 8 (AVX2: 8-row tiles, then the
    6-row tiles for the last rows) gives each element the FMAs of its row alone, in k order: the
    whole product equals its rows computed one at a time, bit for bit, at any row count, for full
    and masked strips, A row- or column-major, and at 1 and 2 threads (row ranges)."""
    mod = load(_small.row_for("matmul", level).level)
    ffi, lib = mod.ffi, mod.lib

    def small(a, b, t=1):
        m, k = a.shape
        n = b.shape[1]
        rsa, csa = (a.strides[0] // 4, a.strides[1] // 4)
        base = a if a.flags.c_contiguous else a.T
        c = np.full((m, n), np.nan, np.float32)
        assert lib.op_gemm_f32_small_mt(m, n, k, ffi.from_buffer(base), rsa, csa,
                                        ffi.from_buffer(b), n, 1, ffi.from_buffer(c), n, 1,
                                        ffi.NULL, t)
        return c

    for n in (5, 7, 8, 13, 21, 24):
        for m, k in ((8, 33), (9, 7), (16, 100), (17, 64), (23, 5), (100, 257)):
            a, b = rand(m, k), rand(k, n)
            for av in (a, np.asfortranarray(a)):
                whole = small(av, b)
                assert_gemm_close(whole, a, b)
                rows_ = np.concatenate([small(np.ascontiguousarray(a[i:i + 1]), b) for i in range(m)])
                assert np.array_equal(whole.view(np.uint32), rows_.view(np.uint32)), (m, k, n)
                assert np.array_equal(whole.view(np.uint32), small(av, b, 2).view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
def test_narrow_b_takes_the_small_kernel_at_any_size(level, threads, monkeypatch, caplog,
                                                     verbose_on):
    """ops._small.NARROW_NN (2026-12-07): a 2-D float32 matmul with a row-major B of 5 to the row's
    columns, from its rows on, K*N within B_MAX, takes the small kernel past LIMITS, its bits those
    of the small kernel forced (``_small.on``) at either thread count; fewer columns or rows, more
    columns, a larger B, ``off()`` and batches keep the packed GEMM. linear and matmul with B = W.T
    alike where the small kernel runs the nt form as its transposed nn form. The row is set for
    this host's level here, so every level runs it (a level without an NT_NN row keeps the packed
    GEMM: the rule holds K within NT_NN's depth in both forms)."""
    from onepath.dispatch import cpu
    row_level = _small.row_for("matmul", level).level
    monkeypatch.setattr(_small, "NARROW_NN", {(cpu.probe().uarch, row_level): (16, 64)})
    _small.reset()
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        def kernel(a, b):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                c = onepath.matmul(a, b)
            lines = [r.getMessage() for r in caplog.records if "matmul" in r.getMessage()]
            return c, lines[-1]

        lim1t = _small.limits(row_level)[1]
        # (the rule holds K within NT_NN's depth in either form; a level without an NT_NN row, whose
        # nt form always takes dot products, keeps the packed GEMM)
        nt_nn = _small.NT_NN.get(row_level)
        for m, k, n in ((300, 4000, 8), (4096, 256, 5), (128, 2048, 16), (64, 1000, 13)):
            a, b = rand(m, k), rand(k, n)
            c, line = kernel(a, b)
            assert ("small" in line) is (nt_nn is not None) or m * n * k <= lim1t, (m, k, n, line)
            if nt_nn is None:
                continue
            assert_gemm_close(c, a, b)
            with _small.on():
                forced = onepath.matmul(a, b)
            assert np.array_equal(c.view(np.uint32), forced.view(np.uint32)), (m, k, n)
        for m, k, n in ((300, 4000, 4), (300, 4000, 17), (63, 4000, 8), (600, 8200, 16)):
            if m * n * k <= lim1t:
                continue
            a, b = rand(m, k), rand(k, n)
            c, line = kernel(a, b)
            assert "small" not in line, (m, k, n, line)
            assert_gemm_close(c, a, b)
        a, b = rand(300, 4000), rand(4000, 8)
        with _small.off():
            c, line = kernel(a, b)
        assert "small" not in line
        # the nn and nt forms answer alike (onepath.dask decides without knowing the layout)
        for m, k, n in ((64, 4096, 8), (64, 4097, 8), (64, 8192, 8), (100, 16384, 8), (300, 2000, 16)):
            nn_ans = _small.use_small(m * n * k, "matmul", "float32", n * k, m, None, n)
            for op in ("matmul", "linear"):
                assert _small.use_small(m * n * k, op, "float32", n * k, m, k, n) == nn_ans, (m, k, n, op)
        c, line = kernel(rand(2, 300, 4000), b)   # a batch: LIMITS alone
        assert "small" not in line
        # the nt form (linear, and matmul with B = W.T) where the small kernel takes it as the
        # transposed nn form (NT_NN: from its rows up to its depth); dot products keep the limits
        for m, k, n in ((300, 4000, 8), (4096, 256, 5), (128, 2048, 16)):
            x, w = rand(m, k), rand(n, k)
            taken = nt_nn is not None and m >= nt_nn[0] and k <= nt_nn[1]
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="onepath"):
                y = onepath.linear(x, w)
            line = [r.getMessage() for r in caplog.records if ",linear," in r.getMessage()][-1]
            assert ("small" in line) is taken or m * n * k <= lim1t, (m, k, n, line)
            assert_gemm_close(y, x, w.T)
            with _small.on():
                forced = onepath.linear(x, w)
            if taken:
                assert np.array_equal(y.view(np.uint32), forced.view(np.uint32)), (m, k, n)
                z, line = kernel(x, w.T)
                assert "small" in line
                assert np.array_equal(z.view(np.uint32), y.view(np.uint32)), (m, k, n)
    finally:
        onepath.set_num_threads(old)
        _small.reset()
