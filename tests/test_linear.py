"""onepath.linear (fused bias + activation), onepath.prepack (reuse, cap change)."""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import onepath
from onepath.dtypes import BF16, F32

pytestmark = pytest.mark.usefixtures("small_path")  # every test with and without the small path

ERF = np.vectorize(math.erf, otypes=[np.float64])
ACTS = {
    None: lambda y: y,
    "relu": lambda y: np.maximum(y, 0),
    "gelu": lambda y: 0.5 * y * (1 + ERF(y / math.sqrt(2))),
    "gelu_tanh": lambda y: 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3))),
    "silu": lambda y: y / (1 + np.exp(-y)),
}


def _ref(x, w, bias, act):
    y = np.matmul(x.astype(np.float64), w.astype(np.float64).T)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return ACTS[act](y)


def _inputs(rng, dt, lead=(2, 7), k=45, n=37):
    x = rng.standard_normal(lead + (k,)).astype(np.float32).astype(dt)
    w = (rng.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32).astype(dt)
    bias = rng.standard_normal(n).astype(np.float32)
    return x, w, bias


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_linear_fused(level, act, dt):
    dt = np.dtype(dt) if dt == "float32" else BF16
    rng = np.random.default_rng(zlib.crc32(f"{act}-{dt.name}".encode()))  # the same data every run
    x, w, bias = _inputs(rng, dt)
    ref = _ref(x, w, bias, act)
    y = onepath.linear(x, w, bias, activation=act, dtype=np.float32)
    assert y.shape == (2, 7, 37) and y.dtype == F32
    assert np.allclose(y, ref, rtol=1e-4, atol=1e-4), np.abs(y - ref).max()
    p = onepath.prepack(w)
    yp = onepath.linear(x, p, bias, activation=act, dtype=np.float32)
    assert np.allclose(yp, ref, rtol=1e-4, atol=1e-4)
    if dt == BF16:
        y16 = onepath.linear(x, w, bias, activation=act)
        assert y16.dtype == BF16
        # one rounding of the float32 result (bias and activation applied before it)
        assert np.array_equal(y16.view(np.uint16), y.astype(BF16).view(np.uint16))
        # a prepacked weight: its own float32 result rounded once (the raw weight's 14 rows may take
        # the dot-product passes where VDPBF16PS is on, which sum in another order than the GEMM)
        yp16 = onepath.linear(x, p, bias, activation=act)
        assert np.array_equal(yp16.view(np.uint16), yp.astype(BF16).view(np.uint16))


def test_linear_mixed_and_shapes(level):
    rng = np.random.default_rng(4)
    x, w, bias = _inputs(rng, BF16, lead=(5,), k=20, n=3)
    y = onepath.linear(x.astype(np.float32), w, bias)  # f32 x bf16 -> f32
    assert y.dtype == F32 and np.allclose(y, _ref(x, w, bias, None), rtol=1e-5, atol=1e-5)
    assert onepath.linear(x[0], w).shape == (3,)                    # 1-D x
    assert onepath.linear(np.ones((2, 3, 4, 20), BF16), w).shape == (2, 3, 4, 3)
    assert onepath.linear(np.ones((0, 20), BF16), w).shape == (0, 3)
    with pytest.raises(ValueError):
        onepath.linear(x, w[:, :5])
    with pytest.raises(ValueError):
        onepath.linear(x, w, np.ones(4, np.float32))
    with pytest.raises(ValueError):
        onepath.linear(x, w, activation="tanh")


@pytest.mark.parametrize("packed", [False, True])
def test_batched_x_same_bits_as_its_rows(level, packed):
    """float32 x of any rank (the small entry folds a C-contiguous x's batch axes into rows; other
    layouts and ranks take the checked path): the bits of the 2-D call on the folded rows, with
    bias and activation, for a raw and a prepacked weight; 1-D x and empty batches too."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((48, 40)) / math.sqrt(40)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    wt = onepath.prepack(w) if packed else w
    for lead in [(3, 5), (2, 2, 7), (1,), (40,), (0, 3)]:
        x = rng.standard_normal(lead + (40,)).astype(np.float32)
        want = onepath.linear(x.reshape(-1, 40), wt, bias, activation="silu")
        for xv in (x, np.asfortranarray(x)):  # C-contiguous, and a layout the entry leaves
            y = onepath.linear(xv, wt, bias, activation="silu")
            assert y.shape == lead + (48,) and y.dtype == F32
            assert np.array_equal(y.reshape(-1, 48).view(np.uint32), want.view(np.uint32)), lead
    v = rng.standard_normal(40).astype(np.float32)
    y1 = onepath.linear(v, wt, bias)
    assert y1.shape == (48,)
    assert np.array_equal(y1.view(np.uint32), onepath.linear(v[None], wt, bias)[0].view(np.uint32))


def test_linear_nonfinite_activation(level):
    x = np.array([[np.inf], [-np.inf], [np.nan], [0.0]], np.float32)
    w = np.ones((1, 1), np.float32)
    for act in ("relu", "gelu", "gelu_tanh", "silu"):
        y = onepath.linear(x, w, activation=act)[:, 0]
        ref = ACTS[act](np.array([np.inf, -np.inf, np.nan, 0.0])) if act == "relu" else None
        assert y[0] == np.inf and np.isnan(y[2]) and y[3] == 0
        # -Inf: relu gives 0; the others give NaN (-Inf times a factor whose limit is 0), as torch
        assert (y[1] == 0) if act == "relu" else np.isnan(y[1])
        if ref is not None:
            assert np.array_equal(np.isnan(y), np.isnan(ref))


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu"])
def test_linear_activation_far_below_zero(level, act):
    """Finite inputs far below zero give -0 (the factor underflows), at every level, in a full
    16-column write-out and in edge columns (3, through a padded copy of 16 lanes)."""
    for xv in (-3e38, -1e31, -1e20, -200.0, -90.0):
        x = np.full((2, 1), xv, np.float32)
        for n in (16, 3):
            y = onepath.linear(x, np.ones((n, 1), np.float32), activation=act)
            assert np.all(y == 0) and np.all(np.signbit(y)), (xv, n, y[0, :4])


def test_prepack_reuse_and_matmul():
    rng = np.random.default_rng(9)
    x, w, bias = _inputs(rng, BF16, lead=(33,), k=70, n=50)
    p = onepath.prepack(w)
    assert p.level == onepath.isa() and p.shape == (50, 70) and p.nbytes > 0
    r1 = onepath.linear(x, p, bias)
    r2 = onepath.linear(x, p, bias)
    assert np.array_equal(r1.view(np.uint16), r2.view(np.uint16)) and p.repacks == 0
    assert np.array_equal(onepath.matmul(x, p).view(np.uint16), onepath.matmul(x, w.T).view(np.uint16))
    w[...] = 0  # the packed copy is a snapshot
    assert np.array_equal(onepath.linear(x, p, bias).view(np.uint16), r1.view(np.uint16))
    pf = onepath.prepack(np.ones((4, 6), np.float32))
    assert np.all(onepath.linear(np.ones((3, 6), np.float32), pf) == 6)
    # float32 of the other byte order, as linear takes it raw; other dtypes still raise
    wbe = np.arange(24, dtype=">f4").reshape(4, 6)
    pbe = onepath.prepack(wbe)
    assert pbe.dtype == np.float32
    assert np.array_equal(onepath.linear(np.ones((3, 6), np.float32), pbe),
                          onepath.linear(np.ones((3, 6), np.float32), wbe))
    with pytest.raises(TypeError, match="float32 and bfloat16 weights, got float64"):
        onepath.prepack(np.ones((4, 6)))
    assert "PackedWeight" in repr(pf)
    with pytest.raises(TypeError, match="right operand only"):
        onepath.matmul(pf, np.ones((6, 3), np.float32))
    with pytest.raises(ValueError, match=r"^matmul: Input operand 1 .*size 6 is different from 5"):
        onepath.matmul(np.ones((3, 5), np.float32), pf)


def test_prepack_pickles_as_its_weight():
    """A PackedWeight pickles as its unpacked weight and is packed again where it is loaded (the
    packed layout belongs to one ISA level)."""
    import pickle
    w = np.random.default_rng(11).standard_normal((24, 40)).astype(np.float32)
    p = onepath.prepack(w, on_cap_change="error")
    q = pickle.loads(pickle.dumps(p))
    assert q.on_cap_change == "error" and q.shape == p.shape and q.level == p.level
    x = np.ones((5, 40), np.float32)
    assert np.array_equal(onepath.linear(x, q), onepath.linear(x, p))


def test_prepack_cap_change():
    host = onepath.available_isas()
    levels = host[: host.index(onepath.isa()) + 1]  # up to the process cap (ONEPATH_MAX_ISA)
    if len(levels) < 2:
        pytest.skip("one level only")
    rng = np.random.default_rng(10)
    x, w, bias = _inputs(rng, BF16, lead=(17,), k=40, n=33)
    ref = _ref(x, w, bias, "gelu")
    p = onepath.prepack(w)
    strict = onepath.prepack(w, on_cap_change="error")
    strict_k0 = onepath.prepack(np.ones((33, 0), np.float32), on_cap_change="error")
    top = p.level
    for low in levels[:-1]:
        with onepath.max_isa(low):
            y = onepath.linear(x, p, bias, activation="gelu", dtype=np.float32)
            assert p.level == low
            assert np.allclose(y, ref, rtol=1e-4, atol=1e-4)
            with pytest.raises(RuntimeError, match="max_isa"):
                onepath.linear(x, strict, bias)
            # the calls that read no packed buffer keep the rule too: no rows, float64 input
            # (numpy's answer), and a weight with no input features
            with pytest.raises(RuntimeError, match="max_isa"):
                onepath.linear(x[:0], strict)
            with pytest.raises(RuntimeError, match="max_isa"):
                onepath.linear(x.astype(np.float64), strict)
            with pytest.raises(RuntimeError, match="max_isa"):
                onepath.linear(np.ones((3, 0), np.float32), strict_k0)
            with onepath.reproducible(), pytest.raises(RuntimeError, match="max_isa"):
                onepath.linear(x, strict)
            with onepath.reproducible(), pytest.raises(RuntimeError, match="max_isa"):
                onepath.matmul(x, strict)
            # a bfloat16 input with a float32 weight (or the reverse): the float32 GEMM of the
            # unpacked weight
            x_other = x.astype(np.float32) if strict.dtype == BF16 else x.astype(BF16)
            with pytest.raises(RuntimeError, match="max_isa"):
                onepath.linear(x_other, strict)
    assert p.repacks == len(levels) - 1
    y = onepath.linear(x, p, bias, activation="gelu", dtype=np.float32)
    assert p.level == top and np.allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert np.allclose(onepath.linear(x, strict, bias, activation="gelu", dtype=np.float32), ref,
                       rtol=1e-4, atol=1e-4)


def test_packed_state_of_a_call_survives_a_repack_for_another_cap():
    """``current_packed`` hands a call its row and buffer together: a repack for another thread's
    cap replaces the weight's state and leaves the call's (row, buffer) as they were, so the call
    never reads another level's layout with its row (a race found by the fresh-user review)."""
    from onepath.dispatch.cap import available_isas
    runnable = [lv for lv in available_isas() if lv in ("generic", "avx2", "avx512_core")]
    if len(runnable) < 2:
        pytest.skip("one float32 level on this host: no other cap to repack for")
    w = np.random.default_rng(7).standard_normal((40, 24)).astype(np.float32)
    x = np.random.default_rng(8).standard_normal((64, 24)).astype(np.float32)
    with onepath.max_isa(runnable[0]):
        p = onepath.prepack(w)
        row, buf = p.current_packed()
    with onepath.max_isa(runnable[-1]):
        row2, buf2 = p.current_packed()  # repacks for this level
        assert p.repacks == 1 and row2.level != row.level and buf2 is not buf
        np.testing.assert_allclose(onepath.linear(x, p), x @ w.T, rtol=1e-5, atol=1e-4)
    assert row.level == runnable[0] and p._state[0] is row2  # the first call's pair is untouched
    with onepath.max_isa(runnable[0]):
        np.testing.assert_allclose(onepath.linear(x, p), x @ w.T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m", [1, 3, 4, 5])
def test_bf16_prepacked_decode_same_bits_as_raw(level, m):
    """Decode rows on a bfloat16 PackedWeight: at levels whose prepacked bfloat16 B is float32
    panels (avx2) up to 4 rows read the raw weight the PackedWeight keeps (ops/linear.py,
    _RAW_DECODE_LEVELS), so they give the raw weight's bits; with bias and activation, both
    output dtypes, and more rows (the packed panels) still within rounding of the raw weight."""
    rng = np.random.default_rng(m)
    k, n = 300, 70
    w = rng.standard_normal((n, k)).astype(BF16)
    x = rng.standard_normal((m, k)).astype(BF16)
    bias = rng.standard_normal(n).astype(np.float32)
    p = onepath.prepack(w)
    for dt in (BF16, F32):
        raw = onepath.linear(x, w, bias, activation="relu", dtype=dt)
        got = onepath.linear(x, p, bias, activation="relu", dtype=dt)
        assert got.dtype == raw.dtype
        if m <= 4 and level == "avx2":
            assert np.array_equal(got.view(np.uint16 if dt == BF16 else np.uint32),
                                  raw.view(np.uint16 if dt == BF16 else np.uint32))
        else:
            np.testing.assert_allclose(got.astype(np.float32), raw.astype(np.float32),
                                       rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu", "relu"])
def test_activation_same_bits_in_every_column(level, act):
    """A value's fused activation does not depend on where it falls in the output: the same values
    through ``linear(x, I)`` (exact: one product by 1, the rest by 0) at widths 1-48, so that they
    land in full tiles, edge columns, tails of rows and the small kernel's rows. Edge columns once
    took libm's erff / tanhf / expf and full tiles the vector polynomial (act_f32.c)."""
    rng = np.random.default_rng(7)
    v = (rng.standard_normal(1680) * 3).astype(np.float32)
    v[:8] = [0.0, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0, 3e38]
    got = {}
    for n in (1, 5, 7, 16, 17, 24, 35, 48):
        x = v[:v.size - v.size % n].reshape(-1, n)
        got[n] = onepath.linear(x, np.eye(n, dtype=np.float32), activation=act).ravel()
    for n, y in got.items():
        np.testing.assert_array_equal(y.view(np.uint32), got[16][:y.size].view(np.uint32),
                                      err_msg=str(n))


def test_empty_sum_logs_the_callers_problem(level, caplog, verbose_on):
    """ONEPATH_VERBOSE: a K == 0 linear and a convolution over an empty input log one line each,
    with their own op and shapes, not the internal K = 1 linear that activates the bias."""
    import logging
    b = np.ones(37, np.float32)
    with caplog.at_level(logging.INFO, logger="onepath"):
        onepath.linear(np.zeros((2, 0), np.float32), np.zeros((37, 0), np.float32), b,
                       activation="gelu")
        onepath.conv2d(np.zeros((1, 0, 3, 3), BF16), np.zeros((37, 0, 1, 1), BF16), b,
                       activation="silu")
        onepath.linear(np.zeros((5, 0), np.float32), onepath.prepack(np.zeros((37, 0), np.float32)))
    lines = caplog.messages
    kernel = f"{level},bias_activation(no_reduction)"
    assert len(lines) == 3, lines
    assert lines[2].startswith(f"onepath,exec,linear,f32:packed:f32,{kernel},5x0:37x0,"), lines[2]
    assert lines[0].startswith(f"onepath,exec,linear,f32:f32:f32,{kernel},2x0:37x0,threads=1,"), \
        lines[0]
    assert lines[1].startswith(f"onepath,exec,conv2d,bf16:f32:bf16,{kernel},"
                               "1x0x3x3*37x0x1x1,threads=1,"), lines[1]


def test_numpy_and_empty_calls_log_one_line(caplog, verbose_on):
    """ONEPATH_VERBOSE's one line per call holds for the calls no kernel runs: linear's numpy path
    (a float64 operand) and products / convolutions with an empty output."""
    import logging
    with caplog.at_level(logging.INFO, logger="onepath"):
        onepath.linear(np.zeros((2, 4)), np.zeros((3, 4), np.float32))
        onepath.linear(np.zeros((0, 4), np.float32), np.zeros((3, 4), np.float32))
        onepath.conv2d(np.zeros((0, 2, 4, 4), np.float32), np.zeros((3, 2, 3, 3), np.float32))
    lines = caplog.messages
    assert len(lines) == 3, lines
    assert lines[0].startswith("onepath,exec,linear,float64:float32:float64,numpy,"
                               "numpy(x @ weight.T),2x4:3x4,threads=0,"), lines[0]
    assert lines[1].startswith("onepath,exec,linear,f32:f32:f32,none,empty_output,0x4:3x4,"), lines[1]
    assert lines[2].startswith("onepath,exec,conv2d,f32:f32:f32,none,empty_output,"
                               "0x2x4x4*3x2x3x3,"), lines[2]


@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_empty_sum_takes_the_kernels_activation(level, act):
    """With nothing to sum (K == 0; a convolution over C == 0 channels) the result is the bias,
    activated with the kernels' bits: those of the same bias over a sum of zeros (K = 1, zero
    inputs); the float64 formula used before differed in 30 of 37 gelu values (found by review)."""
    b = (np.random.default_rng(9).standard_normal(37) * 3).astype(np.float32)
    z = np.zeros
    y0 = onepath.linear(z((2, 0), np.float32), z((37, 0), np.float32), b, activation=act)
    y1 = onepath.linear(z((2, 1), np.float32), z((37, 1), np.float32), b, activation=act)
    np.testing.assert_array_equal(y0.view(np.uint32), y1.view(np.uint32))
    c0 = onepath.conv2d(np.zeros((1, 0, 3, 3), np.float32), np.zeros((37, 0, 1, 1), np.float32), b,
                        activation=act)
    c1 = onepath.conv2d(np.zeros((1, 1, 3, 3), np.float32), np.zeros((37, 1, 1, 1), np.float32), b,
                        activation=act)
    np.testing.assert_array_equal(c0.view(np.uint32), c1.view(np.uint32))
