"""bfloat16 GEMM: every level forced in turn plus the emulated AMX build, against a float64
reference on the same bfloat16 inputs (bounded by K)."""
from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

import onepath
from onepath.dispatch import registry
from onepath.dtypes import BF16, F32
from onepath.kernels import load
from onepath.ops._bf16 import run_gemm_bf16

from conftest import gemm_tolerance

pytestmark = pytest.mark.usefixtures("small_path")  # every test with and without the small path

EPS_BF16 = 2.0 ** -8  # unit roundoff of bfloat16 (8 significand bits)

# M, N not multiples of 16 (and of 14, 32), K odd / not a multiple of 32, M = 1, N = 1; M >= 16
# takes the AMX tiles on the AMX level, M < 16 its VDPBF16PS kernel.
SHAPES = [(1, 1, 1), (1, 37, 65), (37, 1, 31), (3, 5, 2), (17, 33, 70), (45, 71, 129),
          (33, 31, 33), (64, 64, 64), (130, 50, 300), (15, 200, 1100)]


def _rand_bf16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(BF16)


def _ref(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _assert_f32(got, a, b):
    ref = _ref(a, b)
    tol = gemm_tolerance(a.astype(np.float64), b.astype(np.float64), a.shape[-1])
    assert got.dtype == F32 and got.shape == ref.shape
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= tol), f"max err {err.max()} (tol {tol.min()})"


def _assert_bf16(got, a, b):
    ref = _ref(a, b)
    tol = gemm_tolerance(a.astype(np.float64), b.astype(np.float64), a.shape[-1])
    assert got.dtype == BF16 and got.shape == ref.shape
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= tol + EPS_BF16 * (np.abs(ref) + tol)), f"max err {err.max()}"


def _emu(a, b, c_dtype=F32, **kw):
    c = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), c_dtype)
    run_gemm_bf16("matmul", a, b, c, build="amx_emu", **kw)
    return c


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_bf16_gemm_levels(level, m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a, b = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (k, n))
    r32 = onepath.matmul(a, b, dtype=np.float32)
    _assert_f32(r32, a, b)
    r16 = onepath.matmul(a, b)
    _assert_bf16(r16, a, b)
    # bfloat16 result = the float32 result rounded once
    assert np.array_equal(r16.view(np.uint16), r32.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("m,n,k", SHAPES[:8])
def test_bf16_gemm_amx_emulated(m, n, k):
    rng = np.random.default_rng(7 + m + n + k)
    a, b = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (k, n))
    _assert_f32(_emu(a, b), a, b)
    _assert_bf16(_emu(a, b, BF16), a, b)


def test_emulated_strided_batched_and_epilogue():
    rng = np.random.default_rng(3)
    a = _rand_bf16(rng, (2, 40, 50))
    bt = _rand_bf16(rng, (2, 19, 50))
    b = bt.transpose(0, 2, 1)  # K x N with column stride K (a Linear weight transposed)
    _assert_f32(_emu(a, b), a, b)
    _assert_f32(_emu(a[:, ::2, ::-1], b[:, ::-1, :]), a[:, ::2, ::-1], b[:, ::-1, :])
    bias = rng.standard_normal(19).astype(np.float32)
    got = _emu(a, b, bias=bias, activation="relu")
    ref = np.maximum(_ref(a, b) + bias, 0)
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_strided_batched_levels(level):
    rng = np.random.default_rng(5)
    a = _rand_bf16(rng, (3, 21, 40))
    b = _rand_bf16(rng, (40, 35))
    _assert_f32(onepath.matmul(a, b, dtype=np.float32), a, b)
    _assert_f32(onepath.matmul(a[:, :, ::2], b[::2].T.copy().T, dtype=np.float32), a[:, :, ::2], b[::2])
    bt = np.ascontiguousarray(b.T)
    _assert_bf16(onepath.matmul(a, bt.T), a, b)
    v = _rand_bf16(rng, (40,))
    assert onepath.matmul(v, b).shape == (35,) and onepath.matmul(a[0], v).shape == (21,)
    _assert_bf16(onepath.matmul(v, b)[None], v[None], b)


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_ones_exact(level, k):
    for m, n in ((1, 1), (20, 37)):
        a = np.ones((m, k), BF16)
        b = np.ones((k, n), BF16)
        r = onepath.matmul(a, b)
        assert r.dtype == BF16 and np.all(r.astype(np.float32) == k)
        assert np.all(onepath.matmul(a, b, dtype=np.float32) == k)


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_ones_exact_amx_emulated(k):
    a = np.ones((17, k), BF16)
    b = np.ones((k, 18), BF16)
    assert np.all(_emu(a, b) == k)
    assert np.all(_emu(a, b, BF16).astype(np.float32) == k)


def _nan_inf_inputs():
    rng = np.random.default_rng(11)
    a = _rand_bf16(rng, (20, 33))
    b = _rand_bf16(rng, (33, 19))
    a[1, 3] = np.nan
    a[4, 5] = np.inf
    a[6, :] = 0
    a[6, 7] = -np.inf
    b[5, 2] = 0          # inf * 0 -> NaN in (4, 2)
    b[9, 8] = np.inf
    b[:, 10] = 1
    b[7, 10] = 1         # row 6 col 10 = -inf
    return a, b


def _assert_nonfinite_like_f32(got, a, b):
    ref = np.matmul(a.astype(np.float32), b.astype(np.float32))
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isposinf(got), np.isposinf(ref)) and np.array_equal(np.isneginf(got), np.isneginf(ref))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_inf_propagation(level):
    a, b = _nan_inf_inputs()
    _assert_nonfinite_like_f32(onepath.matmul(a, b, dtype=np.float32), a, b)
    _assert_nonfinite_like_f32(onepath.matmul(a, b).astype(np.float32), a, b)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_inf_propagation_amx_emulated():
    a, b = _nan_inf_inputs()
    _assert_nonfinite_like_f32(_emu(a, b), a, b)


def test_mixed_promotion(level):
    rng = np.random.default_rng(2)
    a = _rand_bf16(rng, (9, 30))
    b = rng.standard_normal((30, 11)).astype(np.float32)
    r = onepath.matmul(a, b)
    assert r.dtype == F32
    assert np.allclose(r, np.matmul(a.astype(np.float32), b), rtol=1e-5, atol=1e-5)
    r2 = onepath.matmul(b.T, a.T)
    assert r2.dtype == F32
    out = np.empty((9, 11), BF16)
    assert onepath.matmul(a, b.astype(BF16), out=out) is out
    _assert_bf16(out, a, b.astype(BF16))
    r64 = onepath.matmul(a, b.astype(np.float64))  # not a bf16/f32 pair: numpy's answer
    assert r64.dtype == np.matmul(a, b.astype(np.float64)).dtype


def test_2d_out_shortcut_and_its_fallbacks(level):
    """2-D bfloat16 matmul with ``out`` goes straight to the GEMM (ops.matmul.matmul_bf16_2d) only
    for a fresh, writable, kernel-ready ``out`` of the right shape; every other ``out`` takes the
    general path: an overlapping one gets numpy's answer, a wrong one numpy's error."""
    rng = np.random.default_rng(7)
    a, b = _rand_bf16(rng, (40, 70)), _rand_bf16(rng, (70, 40))
    out = np.empty((40, 40), BF16)
    assert onepath.matmul(a, b, out=out) is out
    _assert_bf16(out, a, b)
    wide = np.zeros((40, 80), BF16)
    assert onepath.matmul(a, b, out=wide[:, ::2]) is not None  # strided out: not kernel-ready
    _assert_bf16(wide[:, ::2], a, b)
    sq, sq2 = _rand_bf16(rng, (40, 40)), _rand_bf16(rng, (40, 40))
    got = sq.copy()
    onepath.matmul(got, sq2, out=got)  # out is the first operand
    _assert_bf16(got, sq, sq2)
    ro = np.empty((40, 40), BF16)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        onepath.matmul(a, b, out=ro)
    with pytest.raises(ValueError):
        onepath.matmul(a, b, out=np.empty((40, 41), BF16))


def test_verbose_names_kernel(level, caplog, verbose_on):
    from onepath import _verbose
    if not hasattr(_verbose, "enabled"):
        pytest.skip("no verbose module")
    import logging
    a = np.ones((20, 8), BF16)
    with caplog.at_level(logging.INFO, logger="onepath"):
        onepath.matmul(a, a.T)
    if not _verbose.enabled():
        pytest.skip("verbose is read once at import")
    assert "gemm_bf16" in caplog.text and "bf16:bf16:bf16" in caplog.text


def test_registry_rows_match_modules():
    from onepath.dispatch import registry
    for row in registry.rows("matmul", "bfloat16"):
        if row.level not in onepath.available_isas() or row.algorithm == "small":  # test_small.py
            continue
        lib = load(row.level).lib
        assert (lib.op_gemm_bf16_mr(), lib.op_gemm_bf16_nr()) == (row.mr, row.nr)
        assert load(row.level).ffi.string(lib.op_gemm_bf16_kernel_name()).decode() == row.name
    emu = load("amx_emu").lib
    assert (emu.op_gemm_bf16_mr(), emu.op_gemm_bf16_nr()) == (32, 32)


@pytest.fixture(params=["widen", "vdpbf16ps"])
def decode_variant(request, level):
    """The small-M loops both ways at the levels with VDPBF16PS (registry.BF16_VARIANTS picks one
    per microarchitecture): widened to float32 + FMA, and VDPBF16PS."""
    from onepath.ops import _bf16
    if request.param == "vdpbf16ps" and level not in ("avx512_core_bf16", "avx512_core_amx"):
        pytest.skip("no VDPBF16PS at this level")
    _bf16.set_variants(level, {"decode_vdpbf16ps"} if request.param == "vdpbf16ps" else ())
    yield request.param
    _bf16.set_variants(level)  # back to the registry's rule


# Small M (decode, m <= 4 at the AVX-512 levels): B read in place as row-major (k, n) (matmul), as a
# raw (n, k) weight (linear: B = W^T) and prepacked; K and N edges, bfloat16 / float32 C, B a column
# slice of a wider array, epilogue, batches, and m = 5 next to it (the tile / register-block driver).
# (70, 2100): K over two depth chunks (2048 + 52) of the VDPBF16PS raw-weight loop, N over several tiles.
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("n,k", [(1, 1), (31, 33), (65, 67), (100, 1100), (64, 4), (70, 2100)])
def test_small_m_forms(level, decode_variant, m, n, k):
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    x, w = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (n, k))
    b_kn = np.ascontiguousarray(w.T)
    _assert_f32(onepath.matmul(x, b_kn, dtype=np.float32), x, b_kn)
    _assert_bf16(onepath.matmul(x, b_kn), x, b_kn)
    _assert_f32(onepath.linear(x, w, dtype=np.float32), x, w.T)
    _assert_bf16(onepath.linear(x, w), x, w.T)
    p = onepath.prepack(w)
    _assert_f32(onepath.linear(x, p, dtype=np.float32), x, w.T)
    _assert_bf16(onepath.linear(x, p), x, w.T)
    # B a column slice of a wider row-major array (rsb > n)
    bw = np.zeros((k, n + 7), BF16)
    bw[:, 3:3 + n] = b_kn
    _assert_f32(onepath.matmul(x, bw[:, 3:3 + n], dtype=np.float32), x, b_kn)


# Small M at every level the host runs, through the GEMM entry (run_gemm_bf16: the small kernel of
# ops/_small.py takes no part): B = W^T (OP_SM_NK, W rows ldw >= k apart) and B row-major (OP_SM_KN,
# rows rsb >= n apart) in place at avx2 and the AVX-512 levels, the driver at generic. K tails of a
# 32-deep step (1..33, 63, 100), K over the depth chunks of avx2's NK loop with m >= 2 (2100, 4096),
# N tails of 16 / 32 columns, float32 and bfloat16 C (= the float32 C rounded once), x with strided
# columns, batches (per-entry and broadcast B), and the same bits at 1 and 2 threads (N split in
# 32-column multiples: each column's sum is the same whatever the split).
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_small_m_forms_tails_and_threads(level, m, cpus):
    cpus(2)
    old = onepath.get_num_threads()
    rng = np.random.default_rng(4099 * m)
    lib, ffi = load(level).lib, load(level).ffi
    decode = level != "generic"
    assert ("decode" in ffi.string(lib.op_gemm_bf16_kernel_for(m, 64, 1)).decode()) == decode
    assert ("decode" in ffi.string(lib.op_gemm_bf16_kernel_for(m, 64, 0)).decode()) == decode
    assert "decode" not in ffi.string(lib.op_gemm_bf16_kernel_for(5, 64, 1)).decode()
    if level == "avx2":   # a prepacked bfloat16 weight: the driver's float32 panels
        assert "decode" not in ffi.string(lib.op_gemm_bf16_kernel_for(m, 64, 2)).decode()

    def run(a, b, c_dtype, batch=()):
        c = np.empty(batch + (a.shape[-2], b.shape[-1]), c_dtype)
        run_gemm_bf16("matmul", a, b, c)
        return c

    shapes = [(k, n) for k in (1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 100)
              for n in (1, 5, 31, 33, 100)]
    shapes += [(2100, 70), (4096, 33), (1100, 300), (4096, 200)]   # the last two: 2 threads
    try:
        for k, n in shapes:
            xw = _rand_bf16(rng, (m, 2 * k))
            x = xw[:, ::2]                                   # columns 2 apart
            wide = _rand_bf16(rng, (n, k + 9))
            w = wide[:, 4:4 + k]                             # W rows k + 9 apart
            bkn = np.zeros((k, n + 5), BF16)
            bkn[:, 2:2 + n] = w.T
            for b in (w.T, bkn[:, 2:2 + n]):                 # NK, KN
                got = {}
                for t in (1, 2):
                    onepath.set_num_threads(t)
                    got[t] = run(x, b, F32), run(x, b, BF16)
                _assert_f32(got[1][0], x, b)
                assert np.array_equal(got[1][1].view(np.uint16),
                                      got[1][0].astype(BF16).view(np.uint16))
                for i in (0, 1):
                    assert np.array_equal(got[1][i].view(np.uint16 if i else np.uint32),
                                          got[2][i].view(np.uint16 if i else np.uint32)), (k, n, i)
        # batches: per-entry B of either form, and a broadcast W^T
        onepath.set_num_threads(2)
        k, n = 77, 45
        xb = _rand_bf16(rng, (3, m, k))
        wb = _rand_bf16(rng, (3, n, k))
        _assert_f32(run(xb, wb.transpose(0, 2, 1), F32, (3,)), xb, wb.transpose(0, 2, 1))
        bb = np.ascontiguousarray(wb.transpose(0, 2, 1))
        _assert_f32(run(xb, bb, F32, (3,)), xb, bb)
        _assert_bf16(run(xb, wb[1].T, BF16, (3,)), xb, wb[1].T)
        # linear with a raw weight: bias + activation on both output dtypes
        w = _rand_bf16(rng, (n, k))
        bias = rng.standard_normal(n).astype(np.float32)
        ref = np.maximum(xb[0].astype(np.float64) @ w.astype(np.float64).T + bias, 0)
        got = onepath.linear(xb[0], w, bias, activation="relu", dtype=np.float32)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        l16 = onepath.linear(xb[0], w, bias, activation="relu")
        assert np.array_equal(l16.view(np.uint16), got.astype(BF16).view(np.uint16))
    finally:
        onepath.set_num_threads(old)


# A raw (n, k) or prepacked weight with 5 to 49 rows of x: where the VDPBF16PS variant is on, passes
# of 4 rows over each 32-row tile of W or 32-column panel (OP_SM_NKDP_MAX_M, OP_SM_PKDP_MAX_M); K
# over two depth chunks (2100), K above the pass limit (8200: the driver), 49 rows (the driver), N
# edges, bias + activation, both output dtypes, a batch of x.
@pytest.mark.parametrize("m", [5, 8, 13, 16, 33, 48, 49])
@pytest.mark.parametrize("n,k", [(70, 2100), (33, 100), (40, 8200)])
@pytest.mark.parametrize("packed", [False, True], ids=["raw", "prepacked"])
def test_weight_row_passes(level, decode_variant, m, n, k, packed):
    rng = np.random.default_rng(m * 131 + n + k)
    x, w = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (n, k))
    wt = onepath.prepack(w) if packed else w
    _assert_f32(onepath.linear(x, wt, dtype=np.float32), x, w.T)
    _assert_bf16(onepath.linear(x, wt), x, w.T)
    bias = rng.standard_normal(n).astype(np.float32)
    ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64).T + bias, 0)
    got = onepath.linear(x, wt, bias, activation="relu", dtype=np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())
    l16 = onepath.linear(x, wt, bias, activation="relu")
    assert np.array_equal(l16.view(np.uint16), got.astype(BF16).view(np.uint16))
    xb = _rand_bf16(rng, (2, m, k))
    _assert_f32(onepath.linear(xb, wt, dtype=np.float32), xb, w.T)
    # entries a row apart (not one flat matrix; the front end copies them into one), bias per column
    xw = np.zeros((2, m + 1, k), BF16)
    xw[:, :m] = xb
    got = onepath.linear(xw[:, :m], wt, bias, dtype=np.float32)
    np.testing.assert_allclose(got, xb.astype(np.float64) @ w.astype(np.float64).T + bias, rtol=1e-4,
                               atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("m", [1, 4])
@pytest.mark.parametrize("act", ["relu", "gelu", "silu"])
def test_small_m_epilogue_and_batch(level, decode_variant, m, act):
    rng = np.random.default_rng(m + len(act))
    n, k = 77, 130
    x, w = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (n, k))
    bias = rng.standard_normal(n).astype(np.float32)
    y = x.astype(np.float64) @ w.astype(np.float64).T + bias
    ref = {"relu": lambda v: np.maximum(v, 0), "silu": lambda v: v / (1 + np.exp(-v)),
           "gelu": lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))}[act](y)
    for wt in (w, onepath.prepack(w)):
        got = onepath.linear(x, wt, bias, activation=act, dtype=np.float32)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())
        got16 = onepath.linear(x, wt, bias, activation=act)
        assert got16.dtype == BF16
        np.testing.assert_allclose(got16.astype(np.float64), ref, rtol=2 * EPS_BF16, atol=1e-3 * np.abs(ref).max())
    # batched matmul with small m: per-entry B and a broadcast B
    xb = _rand_bf16(rng, (3, m, k))
    bb = _rand_bf16(rng, (3, k, n))
    _assert_f32(onepath.matmul(xb, bb, dtype=np.float32), xb, bb)
    _assert_f32(onepath.matmul(xb, bb[0], dtype=np.float32), xb, bb[0])


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_small_m_ones_exact(level, decode_variant, k):
    for m in (1, 4):
        x = np.ones((m, k), BF16)
        w = np.ones((40, k), BF16)
        assert np.all(onepath.matmul(x, np.ascontiguousarray(w.T), dtype=np.float32) == k)
        assert np.all(onepath.linear(x, w, dtype=np.float32) == k)
        assert np.all(onepath.linear(x, onepath.prepack(w), dtype=np.float32) == k)


def test_amx_full_tiles_accumulate_and_epilogue():
    """32 x 32 blocks over several KC blocks (C re-loaded into the tiles) with a fused epilogue on the
    last one, on the emulated build and (where it runs) the real tiles."""
    rng = np.random.default_rng(5)
    a, b = _rand_bf16(rng, (70, 2100)), _rand_bf16(rng, (2100, 96))
    _assert_f32(_emu(a, b), a, b)
    bias = rng.standard_normal(96).astype(np.float32)
    got = _emu(a, b, bias=bias, bias_axis=1, activation="relu")
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())
    if "avx512_core_amx" in onepath.available_isas():
        with onepath.max_isa("avx512_core_amx"):
            _assert_f32(onepath.matmul(a, b, dtype=np.float32), a, b)


@pytest.mark.parametrize("shape", [(40, 70, 2100), (2, 33, 50, 1500)])
def test_bf16_output_over_several_kc_blocks(level, shape):
    """bfloat16 C rounded per finished tile by the driver: K over several KC blocks (float partial
    sums in the driver's scratch), batched, with an epilogue; equal to the float32 result rounded."""
    rng = np.random.default_rng(len(shape) + shape[-1])
    *batch, m, n, k = shape
    a, b = _rand_bf16(rng, (*batch, m, k)), _rand_bf16(rng, (k, n))
    r32 = onepath.matmul(a, b, dtype=np.float32)
    _assert_f32(r32, a, b)
    r16 = onepath.matmul(a, b)
    assert np.array_equal(r16.view(np.uint16), r32.astype(BF16).view(np.uint16))
    w = np.ascontiguousarray(b.T)
    bias = rng.standard_normal(n).astype(np.float32)
    l32 = onepath.linear(a, w, bias, activation="gelu", dtype=np.float32)
    l16 = onepath.linear(a, w, bias, activation="gelu")
    assert np.array_equal(l16.view(np.uint16), l32.astype(BF16).view(np.uint16))
    # a prepacked weight: its own float32 result rounded once (a raw W^T of <= 48 rows may take the
    # dot-product passes where VDPBF16PS is on, which sum in another order than the GEMM)
    p = onepath.prepack(w)
    p32 = onepath.linear(a, p, bias, activation="gelu", dtype=np.float32)
    np.testing.assert_allclose(p32, l32, rtol=1e-5, atol=1e-5 * np.abs(l32).max())
    p16 = onepath.linear(a, p, bias, activation="gelu")
    assert np.array_equal(p16.view(np.uint16), p32.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("variants", [(), ("a_in_place",), ("c_bf16_in_register",),
                                      ("a_in_place", "c_bf16_in_register"), ("thin_nc",),
                                      ("a_in_place", "c_bf16_in_register", "thin_nc")])
def test_vdpbf16ps_gemm_reads_a_in_place(variants):
    """The VDPBF16PS GEMM with A packed and read in place, bfloat16 C through a rounded float tile or
    from the registers (registry.BF16_VARIANTS picks them per microarchitecture): full 14-row panels
    in place, the tail packed; aligned and unaligned A, K a multiple of 32 or not (in place only
    without depth padding), several KC blocks, an epilogue, bfloat16 C."""
    from onepath.ops import _bf16
    level = "avx512_core_bf16"
    if level not in onepath.available_isas():
        pytest.skip(f"{level} cannot run on this host")
    rng = np.random.default_rng(17)
    _bf16.set_variants(level, set(variants))
    try:
        with onepath.max_isa(level):
            for m, n, k in [(45, 71, 128), (64, 96, 96), (29, 40, 2100), (20, 40, 2176), (33, 31, 33),
                            (130, 50, 320), (60, 600, 96), (257, 300, 64)]:
                a, b = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (k, n))
                _assert_f32(onepath.matmul(a, b, dtype=np.float32), a, b)
                _assert_bf16(onepath.matmul(a, b), a, b)
                wide = np.zeros((m, k + 1), BF16)  # rows 2 bytes off 64-byte alignment
                wide[:, 1:] = a
                _assert_f32(onepath.matmul(wide[:, 1:], b, dtype=np.float32), a, b)
            a, w = _rand_bf16(rng, (70, 256)), _rand_bf16(rng, (90, 256))
            bias = rng.standard_normal(90).astype(np.float32)
            ref = np.maximum(a.astype(np.float64) @ w.astype(np.float64).T + bias, 0)
            for wt in (w, onepath.prepack(w)):
                got = onepath.linear(a, wt, bias, activation="relu", dtype=np.float32)
                np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())
                for act in ("relu", "gelu"):  # bfloat16 C: the float result rounded once
                    l32 = onepath.linear(a, wt, bias, activation=act, dtype=np.float32)
                    l16 = onepath.linear(a, wt, bias, activation=act)
                    assert np.array_equal(l16.view(np.uint16), l32.astype(BF16).view(np.uint16))
            # NaN, Inf and subnormal results round as ml_dtypes rounds them (the integer path):
            # row 3 NaN, row 17 zero plus a bias with subnormal entries
            a, w = _rand_bf16(rng, (30, 64)), _rand_bf16(rng, (45, 64))
            a[3, 5], a[17, :] = np.nan, 0
            w[7, 1] = np.inf
            bias = rng.standard_normal(45).astype(np.float32)
            bias[::3] = np.float32(3e-39) * np.arange(1, 16, dtype=np.float32)
            r32 = onepath.linear(a, w, bias, dtype=np.float32)
            r16 = onepath.linear(a, w, bias)
            assert np.isnan(r32).any() and (np.abs(r32) < 1.17e-38).any()
            assert np.array_equal(r16.view(np.uint16), r32.astype(BF16).view(np.uint16))
    finally:
        _bf16.set_variants(level)


@pytest.mark.parametrize("variant, blk", [("thin_nc", None), ("next_panel_l2", None),
                                          ("next_panel_l2", (56, 2048, 96))])
def test_tiling_variant_same_bits(variant, blk):
    """The "thin_nc" variant (at most 256 rows: B swept in blocks of at most 256 columns) changes the
    tiling only, and "next_panel_l2" (the next B micro-panel fetched into L2) only prefetches: the
    same bits as without them, for a raw W^T, a row-major B and a prepacked weight, N over several
    blocks with a tail, K over two KC blocks, float32 and bfloat16 C; ``blk``: a blocking (MC, KC, NC)
    with two row blocks (70 rows at MC 56: the prefetch of the next row block's first panel; 4 calls
    per panel, OP_GEMM_NEXT_PANEL_MIN_CALLS) and several column blocks."""
    from onepath.ops import _bf16
    from onepath.dispatch import tuning
    import contextlib
    level = "avx512_core_bf16"
    if level not in onepath.available_isas():
        pytest.skip(f"{level} cannot run on this host")
    rng = np.random.default_rng(23)
    a, w = _rand_bf16(rng, (70, 2100)), _rand_bf16(rng, (600, 2100))
    bias = rng.standard_normal(600).astype(np.float32)
    out = {}
    over = (tuning.override({(level, op, "bfloat16"): blk for op in ("matmul", "linear")}) if blk
            else contextlib.nullcontext())
    try:
        with onepath.max_isa(level), over:
            p = onepath.prepack(w)
            for on in (False, True):
                _bf16.set_variants(level, registry.bf16_variants(level) | {variant} if on
                                   else registry.bf16_variants(level) - {variant})
                out[on] = [onepath.linear(a, w, bias, dtype=dt) for dt in (np.float32, BF16)]
                out[on] += [onepath.linear(a, p, bias, dtype=dt) for dt in (np.float32, BF16)]
                out[on] += [onepath.matmul(a, np.ascontiguousarray(w.T), dtype=dt) for dt in (np.float32, BF16)]
    finally:
        _bf16.set_variants(level)
    for x, y in zip(out[False], out[True]):
        assert x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8))
    _assert_f32(out[True][4], a, np.ascontiguousarray(w.T))


def test_bf16_output_emulated_several_kc_blocks():
    rng = np.random.default_rng(11)
    a, b = _rand_bf16(rng, (70, 2100)), _rand_bf16(rng, (2100, 45))
    r16 = _emu(a, b, BF16)
    assert np.array_equal(r16.view(np.uint16), _emu(a, b).astype(BF16).view(np.uint16))


def _amx_builds():
    """The AMX tile code: the emulated build everywhere, the real tiles where the host runs them."""
    builds = ["amx_emu"]
    if "avx512_core_amx" in onepath.available_isas():
        builds.append("avx512_core_amx")
    return builds


def _placed(x, off):
    """A copy of x whose data starts ``off`` bytes after a 64-byte boundary."""
    raw = np.empty(x.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + off
    y = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


@pytest.mark.parametrize("build", _amx_builds())
@pytest.mark.parametrize("c_dtype", [F32, BF16])
def test_amx_a_in_place_packed_as_read(build, c_dtype):
    """The AMX GEMM reads A's full 32-row panels in place (rows 64-byte aligned, at most
    OP_GEMM_A_DIRECT_PANELS B panels per block), or in place on the block's first pass over B while
    storing them packed for the other passes (op_ukr_amx_a_pack), or packs them first (K not a
    multiple of 32 in the KC block, a column-strided A); the tail panel is always packed. Every way
    gives the same bits: A at 0, 16 and 2 bytes off a 64-byte boundary and column-major, N of one,
    two, eight and many 32-column panels, M with a tail panel, K over several KC blocks (the last
    one padded), a batch; on the real tiles also with a blocking of several row and column
    blocks."""
    from onepath.dispatch import REGISTRY, tuning
    from onepath.ops import _small
    shapes = [(100, 40, 64), (70, 300, 96), (64, 64, 128), (96, 33, 2100), (45, 520, 2048),
              (33, 256, 64), (130, 270, 320)]
    blockings = [None] if build == "amx_emu" else [None, (64, 128, 96)]
    rng = np.random.default_rng(23)
    for m, n, k in shapes:
        a, b = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (k, n))
        forms = [_placed(a, 0), _placed(a, 16), _placed(a, 2), np.asfortranarray(a)]
        for blk in blockings:
            over = (tuning.override({(r.level, r.op, r.dtype): blk for r in REGISTRY}) if blk
                    else contextlib.nullcontext())
            got = []
            with over:
                for x in forms:
                    if build == "amx_emu":
                        got.append(_emu(x, b, c_dtype))
                    else:
                        with onepath.max_isa(build), _small.off():
                            got.append(onepath.matmul(x, b, dtype=c_dtype))
            (_assert_f32 if c_dtype == F32 else _assert_bf16)(got[0], a, b)
            for y, x in zip(got[1:], forms[1:]):
                assert np.array_equal(y.view(np.uint16), got[0].view(np.uint16)), \
                    f"{build} ({m}, {k}) @ ({k}, {n}) blocking {blk}: A at {x.ctypes.data % 64} " \
                    f"bytes off 64 (C order {x.flags.c_contiguous}) differs from the aligned A"
    a, b = _rand_bf16(rng, (2, 70, 64)), _rand_bf16(rng, (64, 200))
    for off in (0, 16):
        x = _placed(a, off)
        y = _emu(x, b, c_dtype) if build == "amx_emu" else None
        if y is None:
            with onepath.max_isa(build), _small.off():
                y = onepath.matmul(x, b, dtype=c_dtype)
        (_assert_f32 if c_dtype == F32 else _assert_bf16)(y, a, b)


@pytest.mark.parametrize("build", _amx_builds())
@pytest.mark.parametrize("cut", [140, 49, 80])
def test_amx_row_bits_do_not_depend_on_its_tile(build, cut):
    """A row sums in the same order whether it falls in a full 32 x 32 block or an edge block: the
    edge block's accumulators also start from C between KC blocks (summing a block's products
    apart and adding them to C afterwards rounded differently). So row chunks cut at other than
    32-row multiples (onepath.dask's blocks: at least _PAD_ROWS = 49 rows, fewer run other kernels,
    and the small path off, as dask runs them) give the whole call's bits. KC = 64 on the real tiles: 16 KC blocks over K = 1024, where the other order
    differed in 1-3 of the 286 x 64 outputs for most inputs."""
    from onepath.dispatch import REGISTRY, tuning
    # the emulated build runs its own blocking (KC 1024, no registry row): K 4096 gives it 4 KC blocks
    k = 4096 if build == "amx_emu" else 1024
    rng = np.random.default_rng(cut)
    a, b = _rand_bf16(rng, (286, k)), _rand_bf16(rng, (k, 64))
    with tuning.override({(r.level, r.op, r.dtype): (96, 64, 256) for r in REGISTRY}):
        if build == "amx_emu":
            whole = _emu(a, b)
            parts = np.concatenate([_emu(a[:cut], b), _emu(a[cut:], b)])
        else:
            from onepath.ops import _small
            with onepath.max_isa(build), _small.off():   # at 1 thread the parts fit the small kernel
                whole = onepath.matmul(a, b, dtype=np.float32)
                parts = np.concatenate([onepath.matmul(a[:cut], b, dtype=np.float32),
                                        onepath.matmul(a[cut:], b, dtype=np.float32)])
    _assert_f32(whole, a, b)
    assert np.array_equal(parts.view(np.uint32), whole.view(np.uint32)), \
        f"{build}: rows cut at {cut} differ from the whole (286, {k}) @ ({k}, 64) call"


def test_amx_bf16_c_from_tiles_same_bits():
    """At the AMX level the "c_bf16_in_register" variant writes a bfloat16 C from the tiles' float
    scratch in one pass (op_ukr16_amx: epilogue, then rounded once) where the driver otherwise runs
    the epilogue and the rounding as two passes over its tile buffer: the same bits either way, for
    full and edge blocks (A packed: the variant's case; with N <= 64 an aligned A is read in place
    and keeps the driver's path), every activation, NaN / Inf / subnormal results, K in one KC
    block (the variant's case) and over two. The small path is off (it would take some shapes)."""
    from onepath.ops import _bf16
    level = "avx512_core_amx"
    if level not in onepath.available_isas():
        pytest.skip(f"{level} cannot run on this host")
    from onepath.ops import _small
    out = {}
    try:
        with onepath.max_isa(level), _small.off():
            for on in (False, True):
                _bf16.set_variants(level, {"c_bf16_in_register"} if on else set())
                res = []
                for m, n, k in [(70, 90, 256), (64, 96, 64), (64, 64, 64), (33, 47, 96), (130, 300, 2100),
                                (17, 33, 40)]:
                    r2 = np.random.default_rng(m * n * k)   # the same inputs in both runs
                    a, w = _rand_bf16(r2, (m, k)), _rand_bf16(r2, (n, k))
                    a[min(3, m - 1), 1], w[min(5, n - 1), 2] = np.nan, np.inf
                    bias = r2.standard_normal(n).astype(np.float32)
                    bias[::3] = np.float32(3e-39)
                    wide = np.zeros((m, k + 1), BF16)   # rows off 64-byte alignment: A packed
                    wide[:, 1:] = a
                    for x in (a, wide[:, 1:]):
                        res.append(onepath.matmul(x, np.ascontiguousarray(w.T)))
                        for act in (None, "relu", "gelu", "silu"):
                            for wt in (w, onepath.prepack(w)):
                                res.append(onepath.linear(x, wt, bias, activation=act))
                                if on and act == "gelu":
                                    l32 = onepath.linear(x, wt, bias, activation=act, dtype=np.float32)
                                    assert np.array_equal(res[-1].view(np.uint16),
                                                          l32.astype(BF16).view(np.uint16))
                out[on] = res
    finally:
        _bf16.set_variants(level)
    assert len(out[False]) == len(out[True])
    for x, y in zip(out[False], out[True]):
        assert x.dtype == y.dtype == BF16 and np.array_equal(x.view(np.uint16), y.view(np.uint16))


@pytest.mark.parametrize("build", _amx_builds())
def test_amx_depth_chunks_same_bits(build):
    """The "depth_chunks" variant (shipped for sapphirerapids' AMX level) passes each B micro-panel
    in chunks of 256 depths, every row panel per chunk, the float partial sums stored between
    chunks and reloaded into the tiles: the same sums in the same order, so the same bits as one
    pass. Checked off against on for a depth of one chunk and a bit (288), several with a padded
    tail (1000, 1090 under KC 2048), A aligned (read in place; with chunks also past 8 B panels, N
    300) and 16 bytes off (in place and packed as read, or packed where the depth is padded), a
    tail row panel and column panel, float32 and bfloat16 C, the epilogues
    (bias, activations) on a raw and a prepacked weight, NaN / Inf inputs; on the real tiles also
    under a blocking of two row blocks (MC 64, several column blocks) and one whose KC splits K
    (chunks then off: the partial sums go through C as before)."""
    from onepath.dispatch import REGISTRY, tuning
    from onepath.ops import _bf16, _small
    shapes = [(70, 90, 288), (33, 200, 1000), (130, 47, 544), (70, 300, 288)]
    blockings = [None]
    if build == "avx512_core_amx":
        shapes += [(100, 300, 1090), (64, 290, 544)]
        blockings += [(64, 2048, 96), (64, 512, 128)]
    out = {}
    try:
        for on in (False, True):
            _bf16.set_variants(build, {"depth_chunks"} if on else set())
            res = []
            for blk in blockings:
                for m, n, k in shapes:
                    r2 = np.random.default_rng(m * n * k)   # the same inputs in both runs
                    a, w = _rand_bf16(r2, (m, k)), _rand_bf16(r2, (n, k))
                    a[min(3, m - 1), 1], w[min(5, n - 1), 2] = np.nan, np.inf
                    bias = r2.standard_normal(n).astype(np.float32)
                    b = np.ascontiguousarray(w.T)
                    for x in (_placed(a, 0), _placed(a, 16)):
                        if build == "amx_emu":
                            for dt in (F32, BF16):
                                res.append(_emu(x, b, dt))
                                res.append(_emu(x, b, dt, bias=bias, activation="relu"))
                            continue
                        over = (tuning.override({(r.level, r.op, r.dtype): blk for r in REGISTRY})
                                if blk else contextlib.nullcontext())
                        with over, onepath.max_isa(build), _small.off():
                            for dt in (np.float32, BF16):
                                res.append(onepath.matmul(x, b, dtype=dt))
                                for act in (None, "gelu"):
                                    for wt in (w, onepath.prepack(w)):
                                        res.append(onepath.linear(x, wt, bias, activation=act,
                                                                  dtype=dt))
            out[on] = res
    finally:
        _bf16.set_variants(build)
    assert len(out[False]) == len(out[True])
    for i, (x, y) in enumerate(zip(out[False], out[True])):
        assert x.dtype == y.dtype and np.array_equal(x.view(np.uint16), y.view(np.uint16)), \
            f"{build}: result {i} differs with the depth chunks"
    assert sum(np.isfinite(x.astype(np.float32)).sum() for x in out[True]) > 0


def test_amx_thread_splits_same_bits():
    """The AMX GEMM at 1 and 2 threads: the same bits. Two threads split a square's C along N
    (op_split_parts: of equal costs, the split along N for a kernel that packs A as it reads it),
    other shapes along M or N as the costs say; every element is the same sum in the same order
    either way (the same KC, chunks and tiles). The small path is off (it would take some
    shapes)."""
    from onepath.ops import _small
    level = "avx512_core_amx"
    if level not in onepath.available_isas():
        pytest.skip(f"{level} cannot run on this host")
    rng = np.random.default_rng(5)
    prev = onepath.get_num_threads()
    try:
        with onepath.max_isa(level), _small.off():
            for m, n, k in [(256, 256, 256), (320, 320, 600), (96, 640, 288)]:
                a, b = _rand_bf16(rng, (m, k)), _rand_bf16(rng, (k, n))
                got = []
                for t in (1, 2):
                    onepath.set_num_threads(t)
                    got.append(onepath.matmul(a, b, dtype=np.float32))
                _assert_f32(got[0], a, b)
                for t, y in zip((2,), got[1:]):
                    assert np.array_equal(y.view(np.uint32), got[0].view(np.uint32)), \
                        f"({m}, {k}) @ ({k}, {n}) at {t} threads differs from 1 thread"
    finally:
        onepath.set_num_threads(prev)


def test_widen_f32_variant_runs_the_float32_kernel():
    """"widen_f32" at avx512_core_bf16 (shipped for sapphirerapids): a product of at least 49 rows
    runs avx512_core's float32 kernels on widened operands with avx512_core's blocking, so its bits
    are avx512_core's (also under another avx512_core blocking: KC 160 here), a prepacked weight's
    the raw weight's (onepath.dask prepacks on the workers); fewer rows keep the VDPBF16PS kernel
    (the bits with the variant off). Row-major B and a raw (N, K) weight, edges, bias and
    activations, float32 and bfloat16 C, batches; the small path off (it takes some shapes at 1
    thread at both levels)."""
    from onepath.ops import _bf16
    level = "avx512_core_bf16"
    if level not in onepath.available_isas():
        pytest.skip(f"{level} cannot run on this host")
    lib = load(level).lib
    rng = np.random.default_rng(31)

    def runs(w, bias, m, k):
        a = _rand_bf16(rng, (m, k))
        a3 = _rand_bf16(rng, (2, m, k))
        return a, a3, [lambda a=a: onepath.matmul(a, np.ascontiguousarray(w.T)),
                       lambda a=a: onepath.matmul(a, np.ascontiguousarray(w.T), dtype=np.float32),
                       lambda a=a3: onepath.matmul(a, np.ascontiguousarray(w.T)),
                       lambda a=a: onepath.linear(a, w, bias, activation="gelu"),
                       lambda a=a: onepath.linear(a, w, bias, activation="relu", dtype=np.float32),
                       lambda a=a: onepath.linear(a, onepath.prepack(w), bias),
                       lambda a=a: onepath.linear(a, onepath.prepack(w), bias, dtype=np.float32)]
    from onepath.dispatch import tuning
    from onepath.ops import _small
    core_rows = {("avx512_core", op, "bfloat16"): (56, 160, 96) for op in ("matmul", "linear")}
    try:
        for (m, n, k), blk in [((49, 33, 70), None), ((130, 90, 300), None), ((70, 64, 2100), None),
                               ((48, 40, 64), None), ((20, 37, 129), None), ((130, 90, 300), core_rows),
                               ((70, 100, 2100), core_rows)]:
            w = _rand_bf16(rng, (n, k))
            bias = rng.standard_normal(n).astype(np.float32)
            a, a3, fns = runs(w, bias, m, k)
            got = {}
            for setting in ("on", "off", "avx512_core"):
                cap = "avx512_core" if setting == "avx512_core" else level
                with tuning.override(blk or {}), onepath.max_isa(cap), _small.off():
                    if cap == level:
                        _bf16.set_variants(level, {"widen_f32"} if setting == "on" else set())
                    got[setting] = [f() for f in fns]
            _assert_f32(got["on"][1], a, np.ascontiguousarray(w.T))
            _bf16.set_variants(level, set())
            name = ffi_str(lib.op_gemm_bf16_kernel_for(m, k, 0))
            _bf16.set_variants(level, {"widen_f32"})
            name_on = ffi_str(lib.op_gemm_bf16_kernel_for(m, k, 0))
            packed_on = ffi_str(lib.op_gemm_bf16_kernel_for(m, k, 2))
            for i, (x, y, z) in enumerate(zip(got["on"], got["off"], got["avx512_core"])):
                same = z if m >= 49 else y
                assert np.array_equal(x.view(np.uint8), same.view(np.uint8)), (m, n, k, i)
            if m >= 49:
                assert name_on == "gemm_bf16_widen_avx512_core_bf16_14x32" != name
                assert packed_on == name_on
            else:
                assert name_on == name
    finally:
        _bf16.set_variants(level)


def ffi_str(p, level="avx512_core_bf16"):
    return load(level).ffi.string(p).decode()


@pytest.mark.parametrize("build", _amx_builds())
@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_amx_c_not_row_contiguous_same_bits(build, layout):
    """A float32 C whose columns are not contiguous (3 apart, or a transposed view) sends every AMX
    block through the edge path; over several KC blocks (K 2100, the build's KC 1024) its tiles
    start from C between blocks as the full blocks of a contiguous C do: the same bits."""
    rng = np.random.default_rng(37)
    a, b = _rand_bf16(rng, (70, 2100)), _rand_bf16(rng, (2100, 45))
    want = np.empty((70, 45), np.float32)
    with onepath.max_isa(build) if build != "amx_emu" else contextlib.nullcontext():
        run_gemm_bf16("matmul", a, b, want, build=build)
        if layout == "strided":
            big = np.zeros((140, 135), np.float32)
            out = big[::2, ::3]
        else:
            out = np.zeros((45, 70), np.float32).T
        run_gemm_bf16("matmul", a, b, out, build=build)
    _assert_f32(want, a, b)
    assert np.array_equal(np.ascontiguousarray(out).view(np.uint32), want.view(np.uint32))
    if layout == "strided":
        assert np.all(big[1::2] == 0) and np.all(big[:, 1::3] == 0)
