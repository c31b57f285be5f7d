"""onepath.matmul against a float64 reference and against numpy's semantics, at every ISA level."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import onepath
from onepath.dispatch import select
from onepath.kernels import load

from conftest import PKG_ROOT, assert_gemm_close

pytestmark = pytest.mark.usefixtures("small_path")  # every test with and without the small path

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _edge_sizes():
    rows = [r for r in onepath.dispatch.REGISTRY if r.op == "matmul" and r.dtype == "float32"]
    sizes = {1, 2, 3, 7, 13, 31, 37, 97}
    for r in rows:
        sizes |= {r.mr - 1, r.mr, r.mr + 1, r.nr - 1, r.nr, r.nr + 1}
    return sorted(s for s in sizes if s > 0)


@pytest.mark.parametrize("m", _edge_sizes())
def test_edge_m_n(level, m):
    for n in (1, 5, 17, 33, 65):
        a, b = rand(m, 19), rand(19, n)
        assert_gemm_close(onepath.matmul(a, b), a, b)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (64, 64, 64), (101, 103, 107), (257, 129, 300),
                                   (500, 40, 600), (16, 4096, 1), (1, 4096, 300), (700, 3, 900)])
def test_shapes(level, shape):
    m, k, n = shape
    a, b = rand(m, k), rand(k, n)
    assert_gemm_close(onepath.matmul(a, b), a, b)


def test_large_k_crosses_kc_blocks(level):
    row = select("matmul", "float32")
    k = 2 * row.kc + 37
    a, b = rand(45, k), rand(k, 70)
    assert_gemm_close(onepath.matmul(a, b), a, b)


def test_k_just_past_kc(level):
    # K from KC + 1 to 2 KC + 1: the AVX2 driver takes one block up to 5/4 KC and two equal ones
    # up to 2 KC for matmul and linear, raw or prepacked weight (gemm_f32.c, kc_even)
    row = select("matmul", "float32")
    kc = row.kc
    for k in sorted({kc + 1, 5 * kc // 4, 5 * kc // 4 + 1, 2 * kc - 1, 2 * kc, 2 * kc + 1}):
        a, b = rand(70, k), rand(k, 90)
        assert_gemm_close(onepath.matmul(a, b), a, b)
        w = np.ascontiguousarray(b.T)
        assert_gemm_close(onepath.linear(a, w), a, b)
        assert_gemm_close(onepath.linear(a, onepath.prepack(w)), a, b)


def test_large_m_n_cross_mc_nc_blocks(level):
    row = select("matmul", "float32")
    m, n = row.mc + row.mr + 3, min(row.nc + row.nr + 5, 5000)
    a, b = rand(m, 40), rand(40, n)
    assert_gemm_close(onepath.matmul(a, b), a, b)


def test_k_zero_gives_zeros_even_over_nan(level):
    a, b = np.ones((4, 0), np.float32), np.ones((0, 5), np.float32)
    out = np.full((4, 5), np.nan, np.float32)
    r = onepath.matmul(a, b, out)
    assert r is out and np.all(out == 0)
    assert np.array_equal(onepath.matmul(a, b), np.zeros((4, 5), np.float32))


@pytest.mark.parametrize("sa,sb", [((0, 3), (3, 4)), ((3, 4), (4, 0)), ((2, 0, 3), (3, 4)), ((0,), (0,)),
                                   ((0, 5, 3), (1, 3, 2))])
def test_zero_size(level, sa, sb):
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    r, ref = onepath.matmul(a, b), np.matmul(a, b)
    assert r.shape == ref.shape and r.dtype == ref.dtype and np.array_equal(r, ref)


def test_overwrites_nan_in_out(level):
    a, b = rand(30, 50), rand(50, 40)
    out = np.full((30, 40), np.nan, np.float32)
    onepath.matmul(a, b, out=out)
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((2, 3, 4, 5), (5,)),
                                   ((5,), (2, 5, 3)), ((2, 1, 4, 5), (3, 5, 6)), ((1, 4, 5), (7, 5, 2)),
                                   ((3, 4, 5), (5, 2))])
def test_1d_batch_broadcast(level, sa, sb):
    a, b = rand(*sa), rand(*sb)
    r = onepath.matmul(a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert r.shape == ref.shape and r.dtype == np.float32
    assert np.allclose(r, ref, rtol=1e-4, atol=1e-4)


def test_stride_zero_broadcast_views(level):
    a = np.broadcast_to(rand(1, 6, 7), (4, 6, 7))
    b = np.broadcast_to(rand(7, 1), (7, 9))  # stride 0 along N
    assert_gemm_close(onepath.matmul(a, b), a, b)


def test_many_small_batches(level):
    a, b = rand(300, 3, 4), rand(300, 4, 5)
    assert_gemm_close(onepath.matmul(a, b), a, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batch_of_small_entries_in_task_groups(level, dtype):
    # the GEMM driver gives each thread groups of whole entries when they are small (gemm_f32.c,
    # OP_GEMM_BATCH_TASKS): 301 entries (8.5 MFLOP: 2 threads) run in groups of 18 and a last of
    # 13. The float32 small kernel is switched off so that the GEMM driver takes them.
    from onepath.ops import _small
    dt = np.float32 if dtype == "float32" else onepath.bfloat16
    a, b = rand(301, 21, 32).astype(dt), rand(301, 32, 21).astype(dt)
    outs = []
    with _small.off():
        for th in (1, 2):
            saved = onepath.get_num_threads()
            onepath.set_num_threads(th)
            try:
                outs.append(onepath.matmul(a, b))
            finally:
                onepath.set_num_threads(saved)
    assert outs[0].dtype == dt
    assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    rtol, atol = (2e-2, 2e-2) if dtype == "bfloat16" else (1e-5, 1e-4)
    np.testing.assert_allclose(outs[0].astype(np.float64), ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("view", ["T", "fortran", "strided", "negative", "both_negative", "unaligned", "odd_bytes"])
def test_views(level, view):
    base_a, base_b = rand(80, 90), rand(90, 70)
    if view == "T":
        a, b = rand(90, 80).T, rand(70, 90).T
    elif view == "fortran":
        a, b = np.asfortranarray(base_a), np.asfortranarray(base_b)
    elif view == "strided":
        a, b = rand(160, 270)[::2, ::3], rand(180, 140)[::2, ::2]
    elif view == "negative":
        a, b = base_a[::-1], base_b[:, ::-1]
    elif view == "both_negative":
        a, b = base_a[::-1, ::-2], rand(45, 70)[::-1, ::-1]
    elif view == "unaligned":
        buf = np.zeros(80 * 90 * 4 + 1, np.uint8)
        a = buf[1:].view(np.float32).reshape(80, 90)
        a[...] = base_a
        b = base_b
    else:  # strides that are not whole float32 elements
        rec = np.zeros((80, 90), dtype=[("x", np.float32), ("pad", np.uint8)])
        rec["x"] = base_a
        a, b = rec["x"], base_b
    assert_gemm_close(onepath.matmul(a, b), a, b)


def test_out_by_position_and_keyword(level):
    a, b = rand(20, 30), rand(30, 10)
    out1, out2 = np.empty((20, 10), np.float32), np.empty((20, 10), np.float32)
    assert onepath.matmul(a, b, out1) is out1
    assert onepath.matmul(a, b, out=out2) is out2
    assert np.array_equal(out1, out2)
    assert_gemm_close(out1, a, b)


def test_out_noncontiguous(level):
    a, b = rand(20, 30), rand(30, 10)
    big = np.zeros((40, 30), np.float32)
    out = big[::2, ::3]
    onepath.matmul(a, b, out=out)
    assert_gemm_close(out, a, b)
    assert np.all(big[1::2] == 0)


@pytest.mark.parametrize("case", ["out_is_a", "out_is_b", "out_overlaps_a"])
def test_out_overlap(level, case):
    a, b = rand(16, 16), rand(16, 16)
    ref_a, ref_b = a.copy(), b.copy()
    if case == "out_is_a":
        r = onepath.matmul(a, b, out=a)
        assert r is a
    elif case == "out_is_b":
        r = onepath.matmul(a, b, out=b)
        assert r is b
    else:
        buf = rand(24, 16)
        a_view, out = buf[:16], buf[8:]
        ref_a = a_view.copy()
        r = onepath.matmul(a_view, b, out=out)
        assert r is out
    assert_gemm_close(r, ref_a, ref_b)


def test_threads_agree(level, cpus):
    cpus(4)
    a, b = rand(300, 200), rand(200, 260)
    results = []
    old = onepath.get_num_threads()
    try:
        for n in (1, 2, 3):
            onepath.set_num_threads(n)
            results.append(onepath.matmul(a, b))
    finally:
        onepath.set_num_threads(old)
    for r in results:
        assert_gemm_close(r, a, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("m", [143, 286])
@pytest.mark.parametrize("k", [512, 1024])   # bf16 at 1024: A packed (rows 2 KiB apart), else in place
def test_threads_agree_bit_for_bit(level, cpus, small_path, dtype, m, k):
    """The packed GEMM gives the same bits at 1, 2 and 3 threads (and so for row chunks of a
    multiple of the micro-tile, as onepath.dask relies on). M splits into 143 + 143 (143 =
    10 x 14 + 3) or 3 x 95..96 rows: a thread's last panel must sum as the whole call's does (the
    VDPBF16PS kernel's rows <= 4 do not, so the bf16 driver splits M at its 14-row multiples).
    Shipped, a small product runs the single-threaded small kernel at 1 thread (ops/_small.py),
    another kernel: only the GEMM run compares."""
    import ml_dtypes
    if small_path == "small":
        pytest.skip("the small path runs another kernel at 1 thread (tested by the gemm run)")
    cpus(4)
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    a, b = rand(m, k).astype(dt), rand(k, 64).astype(dt)
    old = onepath.get_num_threads()
    try:
        results = []
        for n in (1, 2, 3):
            onepath.set_num_threads(n)
            results.append(onepath.matmul(a, b))
    finally:
        onepath.set_num_threads(old)
    for n, r in zip((2, 3), results[1:]):
        assert np.array_equal(r.view(np.uint16 if dtype == "bfloat16" else np.uint32),
                              results[0].view(np.uint16 if dtype == "bfloat16" else np.uint32)), \
            f"{dtype} {a.shape} @ {b.shape}: {n} threads differ from 1"
    half = m // 2 // 14 * 14   # row chunks at a micro-tile multiple: the whole call's rows
    onepath.set_num_threads(2)
    try:
        parts = np.concatenate([onepath.matmul(a[:half], b), onepath.matmul(a[half:], b)])
    finally:
        onepath.set_num_threads(old)
    assert np.array_equal(parts.view(np.uint16 if dtype == "bfloat16" else np.uint32),
                          results[0].view(np.uint16 if dtype == "bfloat16" else np.uint32))


def test_from_many_python_threads(level):
    a = [rand(150, 120) for _ in range(6)]
    b = [rand(120, 130) for _ in range(6)]
    out = [None] * 6
    cap = onepath.isa()

    def work(i):
        with onepath.max_isa(cap):
            for _ in range(3):
                out[i] = onepath.matmul(a[i], b[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(6):
        assert_gemm_close(out[i], a[i], b[i])


def test_nan_inf_propagate(level):
    a, b = rand(20, 20), rand(20, 20)
    a[3, 4] = np.nan
    b[5, 6] = np.inf
    r = onepath.matmul(a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert np.array_equal(np.isnan(r), np.isnan(ref))
    assert np.array_equal(np.isinf(r), np.isinf(ref))


def test_kernel_reports_registry_blocking(level):
    from onepath.dispatch import rows
    from onepath.dispatch.levels import level_index
    row = select("matmul", "float32")
    below = [r.level for r in rows("matmul", "float32") if level_index(r.level) <= level_index(level)]
    assert row.level == below[0]  # the fastest row the forced level may run
    lib = load(row.level).lib
    assert (lib.op_gemm_f32_mr(), lib.op_gemm_f32_nr()) == (row.mr, row.nr)
    assert load(row.level).ffi.string(lib.op_gemm_f32_kernel_name()).decode() == row.name
    assert row.mc % row.mr == 0 and row.nc % row.nr == 0 and row.kc > 0


# ---- numpy semantics outside the kernels: identical results and identical errors ----

@pytest.mark.parametrize("dt", [np.float64, np.int32, np.int64, np.complex64, np.float16, np.bool_])
def test_other_dtypes_equal_numpy_exactly(dt):
    a = (RNG.standard_normal((7, 5)) * 3).astype(dt)
    b = (RNG.standard_normal((5, 4)) * 3).astype(dt)
    r, ref = onepath.matmul(a, b), np.matmul(a, b)
    assert r.dtype == ref.dtype and np.array_equal(r, ref)


def test_mixed_dtype_and_dtype_kwarg_equal_numpy():
    a, b = rand(7, 5), rand(5, 4).astype(np.float64)
    for args, kw in [((a, b), {}), ((a, a.T), {"dtype": np.float64}), ((b.T, b), {"dtype": np.float32})]:
        r, ref = onepath.matmul(*args, **kw), np.matmul(*args, **kw)
        assert r.dtype == ref.dtype and np.array_equal(r, ref)


def test_lists_accepted():
    r = onepath.matmul([[1.0, 2.0]], [[3.0], [4.0]])
    assert np.array_equal(r, np.matmul([[1.0, 2.0]], [[3.0], [4.0]]))


def test_out_float64_with_float32_inputs_like_numpy():
    a, b = rand(4, 5), rand(5, 6)
    out, ref = np.empty((4, 6)), np.empty((4, 6))
    onepath.matmul(a, b, out=out)
    np.matmul(a, b, out=ref)
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("sa,sb,out_shape", [
    ((3, 4), (5, 6), None), ((4,), (5,), None), ((2, 3, 4), (3, 4, 5), None),
    ((), (3, 3), None), ((3, 3), (), None), ((3, 4), (4, 5), (3, 6))])
def test_errors_match_numpy(sa, sb, out_shape):
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    kw = {} if out_shape is None else {"out": np.empty(out_shape, np.float32)}
    with pytest.raises(Exception) as ours:
        onepath.matmul(a, b, **kw)
    with pytest.raises(Exception) as theirs:
        np.matmul(a, b, **kw)
    assert type(ours.value) is type(theirs.value)


def test_out_with_extra_loop_dims_like_numpy():
    a, b = rand(3, 4), rand(4, 5)
    out, ref = np.empty((2, 3, 5), np.float32), np.empty((2, 3, 5), np.float32)
    onepath.matmul(a, b, out=out)
    np.matmul(a, b, out=ref)
    assert np.allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_matrix_subclass_goes_to_numpy():
    m = np.matrix(np.ones((2, 2), np.float32))
    r = onepath.matmul(m, m)
    assert type(r) is np.matrix and np.array_equal(r, np.matmul(m, m))


# ---- the cap and the thread setting ----

def test_cap_scoped_and_global():
    best = onepath.isa()  # the host's best, or ONEPATH_MAX_ISA when the suite runs capped
    with onepath.max_isa("generic"):
        assert onepath.isa() == "generic"
        assert select("matmul", "float32").level == "generic"
    assert onepath.isa() == best
    try:
        onepath.max_isa("generic")
        assert onepath.isa() == "generic"
    finally:
        onepath.max_isa(best)
    assert onepath.isa() == best


def test_with_blocks_leave_no_process_cap():
    base = onepath.isa()
    outer, inner = onepath.max_isa("generic"), onepath.max_isa("generic")
    with outer:
        with inner:
            assert onepath.isa() == "generic"
    assert onepath.isa() == base
    if "avx2" in onepath.available_isas():
        with onepath.max_isa("generic"):
            with onepath.max_isa("avx2"):  # a nested block never raises the level
                assert onepath.isa() == "generic"


def test_read_only_out_raises_like_numpy():
    a, b = rand(3, 4), rand(4, 5)
    ro = np.zeros((3, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        onepath.matmul(a, b, out=ro)
    assert np.all(ro == 0)


def test_scoped_cap_is_per_thread():
    seen = {}
    inside, release = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen["other"] = onepath.isa()
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with onepath.max_isa("generic"):
        inside.set()
        release.wait()
        seen["mine"] = onepath.isa()
    t.join()
    assert seen == {"mine": "generic", "other": onepath.isa()}


def test_with_statement_never_touches_the_process_cap():
    """`with max_isa(L):` leaves the process cap alone even between the call and __enter__ (it
    used to add a process-wide entry that __enter__ then removed: another thread could run at L)."""
    from onepath.dispatch import cap as cap_mod
    calls = []
    cap_mod.on_change.append(lambda: calls.append(1))
    try:
        with onepath.max_isa("generic"):
            pass
        with onepath.max_isa("generic"), onepath.max_isa("generic"):
            pass
        assert calls == []
        outside = onepath.max_isa("generic")  # not a with statement: a process cap until entered
        assert calls and onepath.isa() == "generic"
        with outside:
            pass
    finally:
        cap_mod.on_change.pop()
    assert not any(ref() is outside for ref, _ in cap_mod._pending)


def test_one_max_isa_object_entered_twice_and_by_two_threads():
    best = onepath.isa()
    m = onepath.max_isa("generic")  # (a process cap until entered)
    with m:
        with m:
            assert onepath.isa() == "generic"
        assert onepath.isa() == "generic"
    assert onepath.isa() == best
    inside, release, seen = threading.Barrier(2), threading.Event(), []

    def block():
        with m:
            inside.wait()
            release.wait()
            seen.append(onepath.isa())
        seen.append(onepath.isa())

    threads = [threading.Thread(target=block) for _ in range(2)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(["generic", "generic", best, best])

    async def task(delay):  # two asyncio tasks of one thread in one object's block, overlapping
        with m:
            await asyncio.sleep(delay)
            inner = onepath.isa()
        return inner, onepath.isa()

    async def both():
        return await asyncio.gather(task(0.01), task(0.03))

    import asyncio
    assert asyncio.run(both()) == [("generic", best), ("generic", best)]
    assert onepath.isa() == best


def test_with_blocks_in_one_thread_never_lower_another():
    best, stop, seen = onepath.isa(), threading.Event(), set()

    def capping():
        while not stop.is_set():
            with onepath.max_isa("generic"):
                pass

    t = threading.Thread(target=capping)
    t.start()
    try:
        for _ in range(20000):
            seen.add(onepath.isa())
    finally:
        stop.set()
        t.join()
    assert seen == {best}


@pytest.mark.parametrize("bad", ["avx1024", "", "AVX3"])
def test_cap_unknown_name_raises(bad):
    with pytest.raises(ValueError, match="generic"):
        onepath.max_isa(bad)


def test_cap_above_host_raises():
    from onepath.dispatch import LEVELS
    above = [lv for lv in LEVELS if lv not in onepath.available_isas()]
    if not above:
        pytest.skip("this host runs every level: no level above it to ask for")
    with pytest.raises(ValueError, match="cannot run"):
        onepath.max_isa(above[0])


def test_env_cap_in_subprocess():
    import os
    import subprocess
    import sys
    env = dict(os.environ, ONEPATH_MAX_ISA="generic")
    out = subprocess.run([sys.executable, "-c", "import onepath; print(onepath.isa())"], cwd=PKG_ROOT,
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "generic"
    env["ONEPATH_MAX_ISA"] = "bogus"
    p = subprocess.run([sys.executable, "-c", "import onepath; onepath.isa()"], env=env,
                       cwd=PKG_ROOT, capture_output=True, text=True)
    assert p.returncode != 0 and "ONEPATH_MAX_ISA" in p.stderr and "generic" in p.stderr


def test_num_threads_setting(cpus):
    cpus(4)
    old = onepath.get_num_threads()
    try:
        onepath.set_num_threads(3)
        assert onepath.get_num_threads() == 3
        onepath.set_num_threads(np.int64(2))
        assert onepath.get_num_threads() == 2
        for bad in (0, -1, 2**31):
            with pytest.raises(ValueError, match="1 to 1024"):
                onepath.set_num_threads(bad)
        for bad in ("x", "2", 2.5, 2.0, True, None):  # not an int: TypeError, as numpy-style APIs
            with pytest.raises(TypeError, match="takes an int"):
                onepath.set_num_threads(bad)
        assert onepath.get_num_threads() == 2
    finally:
        onepath.set_num_threads(old)


def test_verbose_line(caplog, verbose_on):
    import logging
    with caplog.at_level(logging.INFO, logger="onepath"):
        onepath.matmul(rand(8, 9), rand(9, 10))
    line = caplog.records[-1].getMessage()
    from onepath.ops import _small
    row = (_small.row_for("matmul", onepath.isa()) if _small.use_small(8 * 9 * 10)
           else select("matmul", "float32"))
    assert line.startswith("onepath,exec,matmul,f32:f32:f32,") and row.name in line
    assert row.level in line and "8x9:9x10" in line and "threads=" in line and line.endswith("ms")



def test_verbose_line_bf16_numpy_fallback(caplog, verbose_on):
    """A bfloat16 call the kernels leave to numpy (an ``out=`` of another dtype than the result's)
    logs its numpy.matmul line, as float64 calls do (found by the fresh-user review: no line)."""
    import logging
    from onepath.dtypes import BF16
    a = rand(6, 5).astype(BF16)
    for args, kw in [((a, a.T), {"out": np.empty((6, 6), np.float32)}),
                     ((a, a.T), {"out": np.empty((6, 6), np.float64)})]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onepath"):
            r = onepath.matmul(*args, **kw)
        assert np.array_equal(r, np.matmul(*args, **kw))
        assert any(",numpy,numpy.matmul,6x5:5x6," in x.getMessage() for x in caplog.records), \
            [x.getMessage() for x in caplog.records]

# ---- the dot-product path (gemv_f32.c): thin products with both operands contiguous along K ----

@pytest.mark.parametrize("k", [16, 17, 47, 300])
def test_dot_path_decode_and_gemv(level, k):
    for m in (1, 2, 3, 4, 5):
        for n in (1, 2, 3, 4, 5, 8, 9, 33, 100):
            a, w = rand(m, k), rand(n, k)
            assert_gemm_close(onepath.matmul(a, w.T), a, w.T)  # x @ W.T: rsb == 1
    A, v = rand(37, k), rand(k)
    assert_gemm_close(onepath.matmul(A, v), A, v)  # A @ v
    B = rand(3, k)
    assert_gemm_close(onepath.matmul(A, B.T), A, B.T)
    batch_a, batch_w = rand(5, 2, k), rand(5, 7, k)
    assert_gemm_close(onepath.matmul(batch_a, batch_w.transpose(0, 2, 1)), batch_a, batch_w.transpose(0, 2, 1))


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_dot_path_linear_epilogue(level, activation):
    import math
    x, w, bias = rand(3, 70), rand(45, 70), rand(45)
    y = onepath.linear(x, w, bias, activation=activation)
    z = x.astype(np.float64) @ w.astype(np.float64).T + bias
    f = {None: lambda t: t, "relu": lambda t: np.maximum(t, 0),
         "gelu": lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2))),
         "gelu_tanh": lambda t: 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3))),
         "silu": lambda t: t / (1 + np.exp(-t))}[activation]
    assert np.allclose(y, f(z), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [5, 8, 11, 16])
def test_dot_path_tall(level, m):
    """x @ W.T with 5-16 rows of x, K >= 256 (gemv_f32.c, op_dot_tall): K blocks of 256 with a short
    last block and a scalar tail, column tails, A rows not contiguous, batches, the epilogue, and
    each row's bits the same as when the row runs alone (the 1-4 row tiles)."""
    from onepath.ops import _small
    with _small.off():
        for k, n in ((256, 64), (300, 67), (517, 301), (1040, 130)):
            a, w = rand(m, k), rand(n, k)
            c = onepath.matmul(a, w.T)
            assert_gemm_close(c, a, w.T)
            for i in (0, m - 1):
                assert np.array_equal(onepath.matmul(a[i:i + 1], w.T), c[i:i + 1])
        a = rand(m, 700)[:, 3:603]                    # rows 700 floats apart, K = 600
        w = rand(200, 600)
        assert_gemm_close(onepath.matmul(a, w.T), a, w.T)
        ba, bw = rand(3, m, 400), rand(3, 90, 400)
        assert_gemm_close(onepath.matmul(ba, bw.transpose(0, 2, 1)), ba, bw.transpose(0, 2, 1))
        x, wt, bias = rand(m, 333), rand(77, 333), rand(77)
        y = onepath.linear(x, wt, bias, activation="relu")
        assert np.allclose(y, np.maximum(x.astype(np.float64) @ wt.T.astype(np.float64) + bias, 0),
                           rtol=1e-4, atol=1e-4)


def test_dot_path_threads_split(level, cpus):
    cpus(4)
    a, w = rand(2, 600), rand(3000, 600)
    a16 = rand(16, 600)
    old = onepath.get_num_threads()
    try:
        for n in (1, 2, 3):
            onepath.set_num_threads(n)
            assert_gemm_close(onepath.matmul(a, w.T), a, w.T)
            assert_gemm_close(onepath.matmul(a16, w.T), a16, w.T)
            assert_gemm_close(onepath.matmul(w, a[0]), w, a[0])
    finally:
        onepath.set_num_threads(old)


def test_thread_pool_survives_changes_concurrency_and_fork(cpus):
    """The persistent worker pool (kernels/threads.c): thread counts going up and down, calls from
    several Python threads at once (one gets the pool, the others spawn their own threads), and a
    forked child that must rebuild the pool instead of waiting on workers it does not have."""
    import os
    cpus(4)
    a, b = rand(300, 200), rand(200, 260)
    ref = a.astype(np.float64) @ b
    old = onepath.get_num_threads()
    bad = []

    def work():
        for _ in range(10):
            if not np.allclose(onepath.matmul(a, b), ref, rtol=1e-4, atol=1e-3):
                bad.append(1)
    try:
        for n in (2, 4, 3, 1, 2):
            onepath.set_num_threads(n)
            work()
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if hasattr(os, "fork"):
            pid = os.fork()
            if pid == 0:  # child: must not wait for the parent's workers
                try:
                    work()
                finally:
                    os._exit(1 if bad else 0)
            _, status = os.waitpid(pid, 0)
            assert status == 0
    finally:
        onepath.set_num_threads(old)
    assert not bad


def test_pool_worker_leaves_the_callers_cpu():
    """A pool worker found on the caller's CPU when it picks up a job moves to another CPU and gets
    its whole affinity back (kernels/threads.c op_pool_leave_cpu): each round puts the spinning
    worker on the caller's (pinned) CPU, then makes one 2-thread call (subprocess: the pinning
    stays out of the suite's process)."""
    import os
    import subprocess
    import sys
    if not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux (sched_getaffinity, /proc/self/task)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs this process may run on")
    code = """
import os, numpy as np, onepath
onepath.set_num_threads(2)
rng = np.random.default_rng(0)
a = rng.standard_normal((256, 256), dtype=np.float32); b = rng.standard_normal((256, 512), dtype=np.float32)
ref = a.astype(np.float64) @ b
def task(t, what): return open(f"/proc/self/task/{t}/{what}").read()
import time
onepath.matmul(a, b)  # creates the worker; the call does not wait for it to start and name itself
for _ in range(200):
    tids = [int(t) for t in os.listdir("/proc/self/task")
            if task(t, "comm").strip() == "onepath-pool"]
    if tids:
        break
    time.sleep(0.01)
assert tids, "no onepath-pool thread"
allowed = os.sched_getaffinity(0)
c = min(allowed)
os.sched_setaffinity(0, {c})  # this (calling) thread only
moved = 0
for _ in range(20):
    onepath.matmul(a, b)          # the worker spins after it
    for t in tids:                # onto the caller's CPU, its mask widened again at once
        os.sched_setaffinity(t, {c})
        os.sched_setaffinity(t, allowed)
    assert np.allclose(onepath.matmul(a, b), ref, rtol=1e-4, atol=1e-3)
    for _ in range(100):  # (a worker moving itself may be mid-move as the call returns)
        if all(os.sched_getaffinity(t) == allowed for t in tids):
            break
        time.sleep(0.01)
    assert all(os.sched_getaffinity(t) == allowed for t in tids), "a worker was left pinned"
    moved += all(int(task(t, "stat").rsplit(")", 1)[1].split()[36]) != c for t in tids)
print(moved)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 10, f"the worker left the caller's CPU in {r.stdout.strip()} of 20 rounds"


def test_late_pool_worker_never_corrupts_a_later_call():
    """The pool's worker pinned to the caller's CPU is late for most jobs: it wakes after the caller
    ran every task and returned, and must then touch nothing (kernels/threads.c's job word: a
    task is claimed only under its job's generation). Hundreds of 2-thread calls of alternating
    kinds (threaded small kernel, packed GEMM, depthwise conv) must each equal its one-thread
    result bit for bit (subprocess: the pinning stays out of the suite's process)."""
    import os
    import subprocess
    import sys
    if not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux (sched_getaffinity, /proc/self/task)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs this process may run on")
    code = """
import os, time, numpy as np, onepath
from onepath.ops import _small, matmul as mm
_small.MT_ON = True
mm.set_mt_limits()
rng = np.random.default_rng(1)
def r(*s): return rng.standard_normal(s, dtype=np.float32)
cases = [(r(8, 384), r(384, 384)), (r(2, 512), r(512, 96)), (r(96, 200), r(200, 130))]
x = r(1, 24, 20, 20); w = r(24, 1, 3, 3)
onepath.set_num_threads(1)
want = [onepath.matmul(a, b) for a, b in cases] + [onepath.conv2d(x, w, padding=1, groups=24)]
onepath.set_num_threads(2)
onepath.matmul(*cases[0])
for _ in range(200):
    tids = [t for t in os.listdir("/proc/self/task")
            if open(f"/proc/self/task/{t}/comm").read().strip() == "onepath-pool"]
    if tids:
        break
    time.sleep(0.01)
c = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {c})
bad = 0
for i in range(300):
    for t in tids:  # pinned again each time (a call may move a worker it finds without a CPU)
        os.sched_setaffinity(int(t), {c})
    k = i % 4
    got = onepath.matmul(*cases[k]) if k < 3 else onepath.conv2d(x, w, padding=1, groups=24)
    bad += not np.array_equal(got, want[k])
print(bad)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0", f"{r.stdout.strip()} of 300 calls differed from one thread's"


def test_short_calls_run_on_one_thread_after_a_crowded_call():
    """Two calls in a row that find a pool worker awake but never given a CPU mark the pool crowded,
    and small (short) calls then run on the calling thread for a while (kernels/threads.c
    op_parallel_for_short): a threaded small call would only wait for that worker. The worker is
    starved on purpose: SCHED_IDLE, on a CPU a busy process holds (subprocess: the pinning and the
    policy stay out of the suite's process)."""
    import os
    import subprocess
    import sys
    if not hasattr(os, "sched_setscheduler") or not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux (sched_setscheduler, /proc/self/task)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs this process may run on")
    if not onepath.isa().startswith("avx512"):
        pytest.skip("the threaded small kernel's limits are AVX-512's")
    code = """
import os, sys, time, logging, io, subprocess, numpy as np, onepath
from onepath import _verbose
os.environ["ONEPATH_VERBOSE"] = "1"; _verbose.reload()
log = io.StringIO()
logging.getLogger("onepath").addHandler(logging.StreamHandler(log))
logging.getLogger("onepath").setLevel(logging.INFO)
onepath.set_num_threads(2)
rng = np.random.default_rng(0)
a = rng.standard_normal((256, 256), dtype=np.float32)
b = rng.standard_normal((256, 512), dtype=np.float32)
s = rng.standard_normal((128, 128), dtype=np.float32)
def last():
    return log.getvalue().splitlines()[-1]
onepath.matmul(s, s); onepath.matmul(s, s)
steady = "threads=2" in last()   # not crowded: the small kernel on both threads
for _ in range(200):
    tids = [int(t) for t in os.listdir("/proc/self/task")
            if open(f"/proc/self/task/{t}/comm").read().strip() == "onepath-pool"]
    if tids:
        break
    time.sleep(0.01)
c, c2 = sorted(os.sched_getaffinity(0))[:2]
spin = f"import os, itertools; os.sched_setaffinity(0, {{{c}}}); any(0 for _ in itertools.count())"
busy = subprocess.Popen([sys.executable, "-c", spin])
time.sleep(0.3)
os.sched_setaffinity(0, {c2})
hits = tries = 0
try:
    while hits < 3 and tries < 15:      # (another process on the machine may give the worker a
        tries += 1                       # CPU after all: then that try does not count)
        onepath.matmul(a, b)             # the worker picks this up and spins after it ...
        for _ in range(2):               # ... starved: crowded twice in a row (once alone does
            for t in tids:               # not count); a crowded call restores the worker's
                os.sched_setaffinity(t, {c})  # affinity (op_pool_push_off): pinned again
                os.sched_setscheduler(t, os.SCHED_IDLE, os.sched_param(0))
            onepath.matmul(a, b)         # crowded: the worker never picked it up
        onepath.matmul(s, s)             # short: on the calling thread alone
        hits += "threads=1" in last()
        for t in tids:
            os.sched_setscheduler(t, os.SCHED_OTHER, os.sched_param(0))
        time.sleep(0.3)                  # no longer crowded
finally:
    busy.kill()
print(hits, tries, steady)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hits, tries, steady = r.stdout.split()
    assert steady == "True", "an uncrowded small call no longer runs on two threads"
    assert int(hits) >= 3, (f"a short call after a crowded one ran on one thread {hits} of {tries}"
                            " times")


def test_coexists_with_torch_openmp_runtime():
    """A process that loaded PyTorch (and its libgomp) first: onepath's pthread workers and torch's
    OpenMP threads run side by side (subprocess, so the suite's own process stays torch-free)."""
    import subprocess
    import sys
    pytest.importorskip("torch")
    code = """
import torch, numpy as np, threading, onepath
torch.set_num_threads(2)
onepath.set_num_threads(2)
rng = np.random.default_rng(0)
a = rng.standard_normal((300, 200), dtype=np.float32); b = rng.standard_normal((200, 260), dtype=np.float32)
ref = a.astype(np.float64) @ b
def work():
    for _ in range(5):
        assert np.allclose(onepath.matmul(a, b), ref, rtol=1e-4, atol=1e-3)
        torch.matmul(torch.from_numpy(a), torch.from_numpy(b))
ts = [threading.Thread(target=work) for _ in range(3)]
[t.start() for t in ts]; work(); [t.join() for t in ts]
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=PKG_ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_batch_offsets_cache_keeps_small_batches_only():
    # the per-entry offsets of batched calls are cached (ops/_gemm.py) only up to OFFSETS_CACHED
    # entries: a cache of 256 arrays of a million entries each would hold 2 GB
    from onepath.ops import _gemm
    small, big = rand(3, 2, 2), np.zeros((_gemm.OFFSETS_CACHED + 1, 2, 2), np.float32)
    _gemm._offsets.cache_clear()
    off = _gemm.batch_offsets(small, (3,))
    assert list(off) == [0, 4, 8] and not off.flags.writeable
    assert _gemm.batch_offsets(small, (3,)) is off and _gemm._offsets.cache_info().currsize == 1
    assert len(_gemm.batch_offsets(big, big.shape[:1])) == big.shape[0]
    assert _gemm._offsets.cache_info().currsize == 1
