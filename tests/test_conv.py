"""onepath.conv2d / conv1d against an exact float64 reference (and torch when installed), every ISA
level forced in turn, property tests over the options, and the public faults of issue 4."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

import onepath
from onepath.ops.conv import algorithm_for, reference_conv2d, select_conv

EPS32 = float(np.finfo(np.float32).eps)
EPSBF = 2.0 ** -8


def _pads(padding, k, d, s=(1, 1)):
    from onepath.ops.conv import _padding
    return _padding(padding, 2, k, d, s)


def _bound(x, w, b, stride, pads, dil, groups, out_bf16=False):
    """Elementwise error bound: 2 K eps (|x| * |w|) (+ the output rounding in bfloat16)."""
    k = w.shape[1] * w.shape[2] * w.shape[3]
    mag = reference_conv2d(np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(w, np.float64)),
                           None if b is None else np.abs(np.asarray(b, np.float64)),
                           stride, pads, dil, groups)
    tol = 2.0 * (k + 2) * EPS32 * mag + 1e-30
    if out_bf16:
        tol = tol + EPSBF * mag
    return tol


def run_case(n, c, h, w, oc, kh, kw, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
             bias=True, activation=None, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32) if bias else None
    if dtype == bfloat16:
        x, wt = x.astype(bfloat16), wt.astype(bfloat16)
    st2 = (stride, stride) if isinstance(stride, int) else tuple(stride)
    dl2 = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
    pads = _pads(padding, (kh, kw), dl2, st2)
    xin = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = onepath.conv2d(xin, wt, b, stride, padding, dilation, groups, layout=layout,
                         activation=activation)
    assert got.dtype == (bfloat16 if dtype == bfloat16 else np.float32)
    got = np.asarray(got, np.float64)
    if layout == "NHWC":
        got = got.transpose(0, 3, 1, 2)
    ref = reference_conv2d(x, wt, b, st2, pads, dl2, groups)
    tol = _bound(x, wt, b, st2, pads, dl2, groups, out_bf16=dtype == bfloat16)
    if activation is not None:  # the activation is 1-Lipschitz-ish: evaluate it on the reference
        ref = reference_conv2d(x, wt, b, st2, pads, dl2, groups, activation=activation)
        tol = 1.2 * tol + 4 * EPS32 * np.abs(ref) + 1e-6
    assert got.shape == ref.shape, (got.shape, ref.shape)
    err = np.abs(got - ref)
    assert np.all(err <= tol), f"max err {err.max():.3e}, worst excess {(err - tol).max():.3e}"
    return got


# (n, c, h, w, oc, kh, kw, stride, padding, dilation, groups)
CASES = [
    (2, 6, 9, 11, 5, 3, 3, 1, 1, 1, 1),                 # C not a multiple of the vector width
    (1, 3, 17, 15, 16, 7, 7, 2, 3, 1, 1),               # conv1-like
    (2, 8, 9, 11, 6, 3, 2, (2, 1), ((1, 2), (0, 3)), (2, 1), 1),  # asymmetric everything
    (1, 16, 8, 8, 33, 1, 1, 1, 0, 1, 1),                # 1x1 in place
    (2, 8, 9, 11, 6, 1, 1, 2, 0, 1, 1),                 # 1x1 stride 2
    (1, 8, 7, 7, 8, 1, 1, 1, 2, 1, 1),                  # 1x1 with padding (border = bias)
    (2, 8, 9, 11, 6, 3, 3, 1, 1, 1, 2),                 # grouped
    (2, 8, 10, 9, 8, 3, 3, 1, 1, 1, 8),                 # depthwise
    (1, 8, 10, 9, 16, 3, 3, 2, 1, 1, 8),                # depthwise, multiplier 2, stride 2
    (1, 5, 12, 12, 5, 5, 5, (1, 2), 2, 2, 5),           # depthwise 5x5, dilation
    (1, 4, 70, 5, 4, 3, 3, 1, 1, 1, 4),                 # depthwise, wide plane path
    (1, 4, 5, 3, 3, 2, 2, 1, 6, 1, 1),                  # padding far larger than the kernel
    (1, 40, 6, 6, 40, 3, 3, 1, 1, 1, 1),                # K spans several (c, kh, kw) runs
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_levels(level, case, layout):
    run_case(*case, layout=layout)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[6], CASES[8]], ids=str)
def test_conv2d_bf16_levels(level, case, layout):
    run_case(*case, layout=layout, dtype=bfloat16)


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("case", [CASES[0], CASES[7]], ids=["gemm", "dw"])
def test_activation_fused(case, act):
    run_case(*case, activation=act)
    run_case(*case, activation=act, layout="NHWC", bias=False)


def test_large_k_blocks_and_threads():
    # K = 256*9 spans several KC blocks; enough work for the driver to use every thread
    prev = onepath._threads._num_threads
    onepath.set_num_threads(2)
    try:
        run_case(2, 256, 12, 12, 48, 3, 3, 1, 1, 1, 1, layout="NCHW")
        run_case(2, 256, 12, 12, 48, 3, 3, 1, 1, 1, 1, layout="NHWC")
        run_case(2, 64, 20, 20, 64, 3, 3, 1, 1, 1, 64, layout="NCHW")
    finally:
        onepath._threads._num_threads = prev


# ---------------------------------------------------------------- the public faults


def test_fault_bf16_all_ones_2x2():
    x = np.ones((1, 1, 2, 2), bfloat16)
    w = np.ones((1, 1, 2, 2), bfloat16)
    y = onepath.conv2d(x, w)
    assert y.dtype == bfloat16 and y.shape == (1, 1, 1, 1) and float(y[0, 0, 0, 0]) == 4.0
    y = onepath.conv2d(x.transpose(0, 2, 3, 1), w, layout="NHWC")
    assert float(y.reshape(-1)[0]) == 4.0


def test_fault_channels_not_multiple_of_vector(level):
    run_case(1, 6, 5, 5, 6, 3, 3, 1, 1, 1, 1)
    run_case(1, 6, 5, 5, 6, 3, 3, 1, 1, 1, 1, layout="NHWC")


def test_fault_1x1_stride_2(level):
    run_case(1, 8, 7, 7, 4, 1, 1, 2, 0, 1, 1)
    run_case(1, 8, 7, 7, 4, 1, 1, 2, 0, 1, 1, layout="NHWC")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fault_padding_far_larger_than_kernel(layout):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = np.array([1.5, -2.0], np.float32)
    xin = x if layout == "NCHW" else x.transpose(0, 2, 3, 1)
    y = onepath.conv2d(xin, w, b, padding=10, layout=layout)
    if layout == "NHWC":
        y = y.transpose(0, 3, 1, 2)
    assert y.shape == (1, 2, 22, 22)
    border = np.ones((22, 22), bool)
    border[8:14, 8:14] = False  # outputs whose window touches the input
    for o in range(2):
        assert np.all(y[0, o][border] == b[o])


@pytest.mark.parametrize("groups", [1, 4], ids=["dense", "depthwise"])
@pytest.mark.parametrize("stride", [7, 2**31, 2**62, 2**63 - 1, 2**70])
def test_fault_stride_past_the_input(level, stride, groups):
    """A stride past the input leaves one output row and column: the top-left window. A depthwise
    stride of 2**62 crashed (a buffer sized by it overflowed) and 2**63 - 1 gave wrong values."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4 // groups, 3, 3)).astype(np.float32)
    ref = reference_conv2d(x.astype(np.float64), w.astype(np.float64), None, (1, 1),
                           ((0, 0), (0, 0)), (1, 1), groups, None)[:, :, :1, :1]
    for layout in ("NCHW", "NHWC"):
        xin = x if layout == "NCHW" else x.transpose(0, 2, 3, 1)
        y = onepath.conv2d(xin, w, stride=stride, groups=groups, layout=layout)
        y = y if layout == "NCHW" else y.transpose(0, 3, 1, 2)
        assert y.shape == (2, 4, 1, 1)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_padding_past_64_bit_indexing_is_an_error():
    x = np.ones((1, 2, 4, 4), np.float32)
    w = np.ones((2, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"padded input of 1 x 2 x .* 64-bit index arithmetic"):
        onepath.conv2d(x, w, groups=2, stride=2**61, padding=2**40, dilation=2**39)


# ---------------------------------------------------------------- semantics


def test_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(3)
    for (n, c, h, w, oc, kh, kw, s, p, d, g) in CASES:
        if isinstance(p, tuple) and isinstance(p[0], tuple):
            continue
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((oc, c // g, kh, kw)).astype(np.float32)
        b = rng.standard_normal(oc).astype(np.float32)
        ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), s, p, d, g).numpy()
        got = onepath.conv2d(x, wt, b, s, p, d, g)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    for k in (2, 3, 4):  # "same" with even kernels: PyTorch puts the extra row/column after
        x = rng.standard_normal((1, 2, 7, 6)).astype(np.float32)
        wt = rng.standard_normal((3, 2, k, k + 1)).astype(np.float32)
        ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding="same", dilation=(1, 2)).numpy()
        got = onepath.conv2d(x, wt, padding="same", dilation=(1, 2))
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        ref1 = F.conv1d(torch.from_numpy(x[:, :, 0]), torch.from_numpy(wt[:, :, 0]), padding="same").numpy()
        np.testing.assert_allclose(onepath.conv1d(x[:, :, 0], wt[:, :, 0], padding="same"), ref1, rtol=1e-4, atol=1e-4)


def test_reference_float64_exact_path():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 6, 6))
    w = rng.standard_normal((4, 2, 3, 3))
    y = onepath.conv2d(x, w, groups=2, padding="same")
    assert y.dtype == np.float64
    # direct loops
    ref = np.zeros((1, 4, 6, 6))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for o in range(4):
        gi = o // 2
        for i in range(6):
            for j in range(6):
                ref[0, o, i, j] = np.sum(xp[0, 2 * gi:2 * gi + 2, i:i + 3, j:j + 3] * w[o])
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


def test_unbatched_conv1d_nhwc_and_dtypes():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    y = onepath.conv2d(x, w, padding=1)
    assert y.shape == (6, 9, 9)
    np.testing.assert_allclose(y, onepath.conv2d(x[None], w, padding=1)[0], rtol=0, atol=0)
    yn = onepath.conv2d(x.transpose(1, 2, 0), w, padding=1, layout="NHWC")
    assert yn.shape == (9, 9, 6)
    np.testing.assert_allclose(yn.transpose(2, 0, 1), y, rtol=1e-5, atol=1e-5)
    # conv1d (N, C, L) and NLC
    x1 = rng.standard_normal((2, 4, 20)).astype(np.float32)
    w1 = rng.standard_normal((6, 2, 5)).astype(np.float32)
    y1 = onepath.conv1d(x1, w1, stride=2, padding=((1, 3),), dilation=2, groups=2)
    ref = reference_conv2d(x1[:, :, None], w1[:, :, None], None, (1, 2), ((0, 0), (1, 3)), (1, 2), 2)[:, :, 0]
    np.testing.assert_allclose(y1, ref, rtol=1e-5, atol=1e-5)
    y1n = onepath.conv1d(x1.transpose(0, 2, 1), w1, stride=2, padding=((1, 3),), dilation=2, groups=2,
                         layout="NLC")
    np.testing.assert_allclose(y1n.transpose(0, 2, 1), ref, rtol=1e-5, atol=1e-5)
    # promotion: bf16 x f32 -> f32; dtype= overrides
    xb = x.astype(bfloat16)
    assert onepath.conv2d(xb, w).dtype == np.float32
    assert onepath.conv2d(xb, w.astype(bfloat16)).dtype == bfloat16
    assert onepath.conv2d(x, w, dtype=bfloat16).dtype == bfloat16
    assert onepath.conv2d(x, w, dtype=np.float64).dtype == np.float64
    # a strided / non-contiguous weight and input
    wbig = np.zeros((6, 8, 3, 3), np.float32)
    wbig[:, ::2] = w
    np.testing.assert_allclose(onepath.conv2d(x[:, ::1, ::1], wbig[:, ::2]), onepath.conv2d(x, w),
                               rtol=0, atol=0)


def test_empty_shapes():
    w = np.ones((4, 3, 3, 3), np.float32)
    b = np.arange(4, dtype=np.float32)
    assert onepath.conv2d(np.ones((0, 3, 5, 5), np.float32), w, b).shape == (0, 4, 3, 3)
    assert onepath.conv2d(np.ones((0, 5, 5, 3), np.float32), w, b, layout="NHWC").shape == (0, 3, 3, 4)
    # no input channels: nothing to sum, the output is the bias
    y = onepath.conv2d(np.ones((2, 0, 5, 5), np.float32), np.ones((4, 0, 3, 3), np.float32), b)
    assert y.shape == (2, 4, 3, 3) and np.all(y == b[None, :, None, None])
    # empty spatial input with enough padding: every window is padding -> bias (activated)
    y = onepath.conv2d(np.ones((1, 3, 0, 4), np.float32), w, b - 2, padding=2, activation="relu")
    assert y.shape == (1, 4, 2, 6) and np.all(y == np.maximum(b - 2, 0)[None, :, None, None])


@pytest.mark.parametrize("kwargs, x_shape, w_shape, match", [
    ({}, (1, 4, 5, 5), (2, 3, 3, 3), r"expected input\[1, 4, 5, 5\] to have 3 channels"),
    ({"groups": 2}, (1, 4, 5, 5), (3, 2, 3, 3), r"divisible by 2 .*\[3, 2, 3, 3\]"),
    ({"groups": 3}, (1, 4, 5, 5), (3, 1, 3, 3), r"expected input\[1, 4, 5, 5\] to have 3 channels"),
    ({}, (1, 3, 2, 2), (2, 3, 3, 3), r"padded input size per channel: \(2 x 2\)\. Kernel size: \(3 x 3\)"),
    ({"dilation": 2, "padding": 0}, (1, 3, 4, 4), (2, 3, 3, 3), r"\(4 x 4\)\. Kernel size: \(5 x 5\)"),
    ({"stride": 0}, (1, 3, 5, 5), (2, 3, 3, 3), "non-positive stride"),
    ({"dilation": (1, 0)}, (1, 3, 5, 5), (2, 3, 3, 3), "dilation should be greater than zero"),
    ({"padding": -1}, (1, 3, 5, 5), (2, 3, 3, 3), "negative padding"),
    ({"padding": ((0, 1), (-1, 0))}, (1, 3, 5, 5), (2, 3, 3, 3), "negative padding"),
    ({"padding": "same", "stride": 2}, (1, 3, 5, 5), (2, 3, 3, 3), "not supported for strided"),
    ({"padding": "full"}, (1, 3, 5, 5), (2, 3, 3, 3), "Invalid padding string"),
    ({}, (3, 5), (2, 3, 3, 3), r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got input of size: \[3, 5\]"),
    ({}, (1, 3, 5, 5), (2, 3, 3), r"weight of size: \[2, 3, 3\]"),
    ({"groups": 0}, (1, 3, 5, 5), (2, 3, 3, 3), "non-positive groups"),
    ({"stride": (1, 2, 3)}, (1, 3, 5, 5), (2, 3, 3, 3), "list of 2 values"),
    ({"layout": "CHWN"}, (1, 3, 5, 5), (2, 3, 3, 3), "unknown layout"),
    ({"activation": "tanh"}, (1, 3, 5, 5), (2, 3, 3, 3), "unknown activation"),
    ({}, (1, 4, 5, 5), (8, 4, 0, 3), r"kernel size should be greater than zero, but got kernel_height: 0 kernel_width: 3"),
    ({}, (0, 4, 5, 5), (8, 4, 3, 0), r"kernel_height: 3 kernel_width: 0"),
    ({}, (1, 4, 5, 5), (0, 4, 3, 3), r"expected weight to be at least 1 at dimension 0, but got weight of size \[0, 4, 3, 3\]"),
])
def test_errors(kwargs, x_shape, w_shape, match):
    with pytest.raises(ValueError, match=match):
        onepath.conv2d(np.ones(x_shape, np.float32), np.ones(w_shape, np.float32), **kwargs)


def test_errors_conv1d_kernel_and_layout():
    with pytest.raises(ValueError, match=r"kernel_width: 0 \(weight of size \[8, 4, 0\]\)"):
        onepath.conv1d(np.ones((1, 4, 5), np.float32), np.ones((8, 4, 0), np.float32))
    with pytest.raises(ValueError, match="conv1d: unknown layout 'NHWC'"):
        onepath.conv1d(np.ones((1, 4, 5), np.float32), np.ones((8, 4, 3), np.float32), layout="NHWC")
    y = onepath.conv1d(np.ones((1, 5, 4), np.float32), np.ones((8, 4, 3), np.float32), layout="nwc")
    assert y.shape == (1, 3, 8) and np.all(y == 12)


def test_errors_bias_rank_dtype():
    x, w = np.ones((1, 3, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"bias to be 1-dimensional with 2 elements, but got bias of size \[3\]"):
        onepath.conv2d(x, w, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="float32, bfloat16, float64"):
        onepath.conv2d(x.astype(np.float16), w)
    with pytest.raises(TypeError, match="float32, bfloat16, float64"):
        onepath.conv2d(x.astype(np.int32), w)
    with pytest.raises(TypeError, match="float32, bfloat16, float64"):
        onepath.conv2d(x, w, dtype=np.float16)
    with pytest.raises(ValueError, match=r"input to conv1d, but got input of size: \[1, 3, 5, 5\]"):
        onepath.conv1d(x, w[:, :, 0])


def test_select_and_verbose(caplog, monkeypatch):
    assert algorithm_for(8, 8, 3, 3, 8) == "depthwise"
    assert algorithm_for(8, 16, 1, 1, 1) == "1x1_gemm"
    assert algorithm_for(8, 16, 3, 3, 2) == "grouped"
    assert algorithm_for(8, 16, 3, 3, 1) == "implicit_gemm"
    row = onepath.dispatch.select("conv2d", "float32")
    assert row.algorithm == "implicit_gemm" and row.level in onepath.available_isas()
    for algo in ("implicit_gemm", "1x1_gemm", "grouped", "depthwise"):
        for lv in onepath.available_isas():
            r = select_conv(algo, "float32", lv)
            assert r.algorithm == algo and algo in r.name
    monkeypatch.setenv("ONEPATH_VERBOSE", "1")
    from onepath import _verbose
    _verbose.reload()
    with caplog.at_level(logging.INFO, logger="onepath"):
        onepath.conv2d(np.ones((1, 4, 6, 6), np.float32), np.ones((4, 1, 3, 3), np.float32), groups=4)
    line = [r.getMessage() for r in caplog.records if "conv2d" in r.getMessage()][-1]
    assert "depthwise" in line and onepath.isa() in line or select_conv("depthwise").level in line


# ---------------------------------------------------------------- property test


@st.composite
def problems(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    dw = draw(st.booleans()) and groups == 1
    cg = 1 if dw else draw(st.integers(1, 5))
    if dw:
        groups = draw(st.integers(2, 6))
    c = cg * groups
    ocg = draw(st.integers(1, 3)) if dw else draw(st.integers(1, 6))
    oc = ocg * groups
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw_ = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pad = draw(st.one_of(
        st.integers(0, 5),
        st.tuples(st.tuples(st.integers(0, 5), st.integers(0, 5)), st.tuples(st.integers(0, 5), st.integers(0, 5))),
        st.just("valid"), st.just("same")))
    if pad == "same":
        sh = sw = 1
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    ekh, ekw = dh * (kh - 1) + 1, dw_ * (kw - 1) + 1
    if isinstance(pad, int):
        ph = pw = 2 * pad
    elif isinstance(pad, tuple):
        ph, pw = sum(pad[0]), sum(pad[1])
    else:
        ph = pw = 0 if pad == "valid" else None
    if ph is not None:
        h, w = max(h, ekh - ph), max(w, ekw - pw)
    n = draw(st.integers(1, 3))
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    dtype = draw(st.sampled_from([np.float32, np.float32, bfloat16]))
    return (n, c, h, w, oc, kh, kw, (sh, sw), pad, (dh, dw_), groups), layout, dtype


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(0, 2 ** 31 - 1))
def test_property(problem, seed):
    case, layout, dtype = problem
    run_case(*case, layout=layout, dtype=dtype, seed=seed)


# ---------------------------------------------------------------- native BF16 GEMM conv and the 3x3 depthwise kernel

BF16_NATIVE_CASES = [
    (1, 40, 9, 11, 37, 3, 3, 1, 1, 1, 1),               # K = 360: several 32-depth blocks, odd N edges
    (2, 70, 6, 7, 33, 3, 3, 2, 1, 1, 1),                # stride 2, C not a multiple of 32
    (1, 64, 8, 8, 48, 1, 1, 1, 0, 1, 1),                # 1x1 in place
    (1, 48, 9, 9, 20, 1, 1, 2, 0, 1, 1),                # 1x1 strided (gathered)
    (1, 24, 7, 9, 18, 3, 3, 1, 2, 2, 3),                # grouped, dilated, bias per group
    (1, 3, 20, 20, 17, 7, 7, 2, 3, 1, 1),               # conv1-like (C = 3)
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", BF16_NATIVE_CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_bf16_native_levels(level, case, layout):
    run_case(*case, layout=layout, dtype=bfloat16)
    if case[2] * case[3] > 60:
        run_case(*case, layout=layout, dtype=bfloat16, activation="relu", seed=3)


def test_conv2d_bf16_input_f32_weight_widens():
    # bfloat16 input with a float32 weight computes in float32 (the weight is not rounded)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 40, 6, 6)).astype(bfloat16)
    w = rng.standard_normal((8, 40, 3, 3)).astype(np.float32)
    got = onepath.conv2d(x, w, padding=1)
    assert got.dtype == np.float32
    ref = reference_conv2d(x.astype(np.float64), w, None, (1, 1), ((1, 1), (1, 1)))
    tol = _bound(x.astype(np.float32), w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    assert np.all(np.abs(got - ref) <= tol)


@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("case", [BF16_NATIVE_CASES[0], BF16_NATIVE_CASES[2], BF16_NATIVE_CASES[4]],
                         ids=["3x3", "1x1", "grouped"])
def test_conv2d_bf16_amx_emulated(case, nhwc):
    """The amx_emu build runs op_conv2d_bf16 through the emulated tile kernel (any host)."""
    from onepath.kernels import load
    n, c, h, w, oc, kh, kw, s, p, dl, g = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w)).astype(bfloat16)
    wt = rng.standard_normal((oc, c // g, kh, kw)).astype(bfloat16)
    b = rng.standard_normal(oc).astype(np.float32)
    oh = (h + 2 * p - dl * (kh - 1) - 1) // s + 1
    ow = (w + 2 * p - dl * (kw - 1) - 1) // s + 1
    mod = load("amx_emu")
    onepath._stats.record("conv2d", "bfloat16", "amx_emu")  # for the coverage report
    ffi, lib = mod.ffi, mod.lib
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = n, c, h, w, oc, oh, ow, kh, kw
    d.sh = d.sw = s
    d.pt = d.pl = p
    d.dh = d.dw = dl
    d.groups, d.nhwc = g, nhwc
    xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1) if nhwc else x).view(np.uint16)
    wk = np.ascontiguousarray(wt).view(np.uint16)
    y = np.empty((n, oh, ow, oc) if nhwc else (n, oc, oh, ow), np.float32)
    used = lib.op_conv2d_bf16(d, ffi.cast("const uint16_t *", xin.ctypes.data),
                              ffi.cast("const uint16_t *", wk.ctypes.data),
                              ffi.cast("const float *", b.ctypes.data), ffi.cast("float *", y.ctypes.data),
                              0, 0, ffi.NULL, 2)
    assert used >= 1
    got = y.transpose(0, 3, 1, 2) if nhwc else y
    st2, pads, dl2 = (s, s), ((p, p), (p, p)), (dl, dl)
    ref = reference_conv2d(x, wt, b, st2, pads, dl2, g)
    tol = _bound(x.astype(np.float32), wt.astype(np.float32), b, st2, pads, dl2, g)
    assert np.all(np.abs(got - ref) <= tol)


DW3_CASES = [  # (n, c, h, w, stride, pad, mult): planes wider than a vector, odd sizes, row remainders
    (1, 3, 37, 45, 1, 1, 1),
    (2, 2, 30, 33, 2, 1, 1),
    (1, 2, 29, 17, 2, 1, 2),
    (1, 3, 5, 70, 1, 0, 1),
    (1, 2, 9, 40, 2, 2, 1),
    (1, 2, 6, 1030, 1, 1, 1),    # more than one 1024-column stripe
    (2, 37, 7, 7, 1, 1, 1),      # small planes (W <= 8, padding 1): the flat kernel, runs of planes
    (1, 5, 3, 8, 1, 1, 3),
    (1, 4, 1, 1, 1, 1, 2),
    (3, 9, 8, 5, 1, 1, 1),
    (1, 6, 14, 14, 1, 1, 1),
    (2, 5, 14, 14, 2, 1, 1),     # stride 2, short output rows: the phase-plane kernel
    (1, 3, 15, 9, 2, 0, 2),
    (1, 2, 13, 21, 2, 2, 1),
    (1, 2, 9, 12, 2, 2, 1),
    (2, 3, 5, 1, 2, 1, 1),
    (1, 3, 64, 64, 1, 1, 1),     # the largest float32 flat plane
    (1, 3, 11, 9, 1, 1, 1),      # float32 whole rows in registers: 1 to 4 vectors per row,
    (2, 2, 7, 30, 1, 1, 1),      # row-block remainders
    (1, 2, 5, 47, 1, 1, 2),
    (1, 2, 3, 64, 1, 1, 1),
    (1, 2, 6, 100, 1, 1, 1),
    (1, 2, 5, 112, 1, 1, 1),
    (1, 2, 6, 65, 1, 1, 1),      # bfloat16 even / odd columns: one column past two 32-column chunks,
    (1, 2, 9, 96, 1, 1, 2),      # whole chunks, a row block + remainder, multiplier 2
    (1, 2, 11, 70, 2, 1, 1),     # stride 2 rows (bfloat16: 32-column loads): blocks + a tail,
    (1, 1, 3, 2100, 2, 1, 1),    # more than one 1024-output stripe
    (1, 2, 8, 4100, 1, 1, 1),    # AVX2 builds: float32 rows wider than their zero row (4096 columns)
    (1, 1, 13, 4103, 2, 1, 2),   # go through the ring of padded rows, as bfloat16 does
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
@pytest.mark.parametrize("case", DW3_CASES, ids=lambda c: "x".join(map(str, c)))
def test_depthwise_3x3_direct(level, case, dtype, layout):
    n, c, h, w, s, p, m = case
    run_case(n, c, h, w, c * m, 3, 3, s, p, 1, c, dtype=dtype, layout=layout)
    run_case(n, c, h, w, c * m, 3, 3, s, p, 1, c, dtype=dtype, activation="silu", bias=False, seed=2,
             layout=layout)


# NHWC channel-vector kernel (3x3, multiplier 1, stride 1 or 2 along W): channel tails, blocks of
# 8 output pixels and their remainders, border pixels, any stride / dilation / padding along H
# (n, c, h, w, stride, padding, dilation)
NHWC3_CASES = [
    (1, 33, 6, 30, 1, 0, 1),
    (2, 17, 9, 27, 2, 1, 1),
    (1, 20, 9, 13, (3, 2), ((0, 2), (1, 0)), (2, 1)),
    (1, 48, 4, 3, 1, 2, 1),
    (1, 5, 7, 40, (1, 2), ((1, 1), (2, 2)), 1),
    (1, 64, 3, 2, 2, 1, 1),
    # AVX2 builds (op_dw8n_row): 8 channels per vector, inner pixels by 8, then 4, 2 and 1 (15 =
    # 8 + 4 + 2 + 1; 29 = 3 x 8 + 4 + 1), a channel tail after whole vectors, stride 2 rows
    (1, 19, 5, 17, 1, 1, 1),
    (2, 24, 4, 31, 1, 1, 1),
    (1, 8, 6, 35, 2, 1, 1),
]


@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
@pytest.mark.parametrize("case", NHWC3_CASES, ids=str)
def test_depthwise_nhwc_3x3(level, case, dtype):
    n, c, h, w, s, p, dl = case
    run_case(n, c, h, w, c, 3, 3, s, p, dl, c, dtype=dtype, layout="NHWC")
    run_case(n, c, h, w, c, 3, 3, s, p, dl, c, dtype=dtype, layout="NHWC", activation="gelu", seed=4)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
def test_depthwise_nhwc_row_runs_over_threads(level, threads, dtype, nan_filled_outputs):
    """NHWC depthwise tasks are runs of consecutive output rows (n * OH rows, 4 runs per thread):
    every row written once when the rows do not divide into runs, with fewer rows than runs, across
    images and with stride 2 (outputs start NaN-filled, so a row left unwritten fails)."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        run_case(3, 40, 7, 60, 40, 3, 3, 1, 1, 1, 40, layout="NHWC", dtype=dtype)  # 21 rows
        run_case(2, 24, 13, 50, 24, 3, 3, 2, 1, 1, 24, layout="NHWC", dtype=dtype,  # 14 rows
                 activation="relu", seed=1)
        run_case(1, 96, 3, 200, 96, 3, 3, 1, 1, 1, 96, layout="NHWC", dtype=dtype)  # 3 rows
        run_case(2, 20, 9, 70, 20, 5, 5, 1, 2, 1, 20, layout="NHWC", dtype=dtype)  # 5x5 (row path)
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act", [None, "relu", "gelu"])
def test_depthwise_small_planes_many_channels(level, threads, act):
    """Many small planes split in runs of planes over threads (every plane written once)."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        for dtype in (np.float32, bfloat16):
            run_case(2, 300, 7, 7, 300, 3, 3, 1, 1, 1, 300, dtype=dtype, activation=act)
            run_case(1, 130, 4, 6, 260, 3, 3, 2, 1, 1, 130, dtype=dtype, activation=act)
    finally:
        onepath.set_num_threads(old)


# 3x3 padding-1 planes on the AVX2 builds' flat kernels (op_dw8f): stride 1 (float32 rows of at
# most 32 columns, bfloat16 any width) and stride 2 from even-sized planes; output rows of 4..8
# columns (a block's lanes span 2-3 rows), periods of 1..64 blocks, a plane that ends inside a
# block, multiplier 2 with runs of planes across images, the largest plane (16384 outputs) and
# the first one past it (n, c, h, w, stride, multiplier)
DW8F_CASES = [
    (2, 3, 5, 4, 1, 1), (1, 4, 9, 5, 1, 2), (3, 5, 6, 6, 1, 1), (2, 3, 7, 7, 1, 2),
    (1, 2, 11, 13, 1, 1), (1, 3, 28, 32, 1, 1), (1, 2, 30, 33, 1, 1),
    (2, 3, 8, 8, 2, 1), (1, 4, 10, 10, 2, 2), (2, 3, 14, 14, 2, 1), (1, 2, 6, 26, 2, 1),
    (1, 2, 22, 130, 2, 1), (1, 1, 256, 128, 2, 1), (1, 1, 128, 128, 1, 1), (1, 1, 129, 128, 1, 1),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act", [None, "relu", "gelu"])
@pytest.mark.parametrize("case", DW8F_CASES, ids=lambda c: "x".join(map(str, c)))
def test_depthwise_flat_planes(level, case, act, threads, nan_filled_outputs):
    """Every output of the flat 3x3 planes (and of whichever kernel takes them at other levels)
    is written and matches the reference, float32 and bfloat16, with ReLU in registers or any
    other activation applied to the finished plane, at 1 and 2 threads."""
    n, c, h, w, s, m = case
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        for dtype in (np.float32, bfloat16):
            run_case(n, c, h, w, c * m, 3, 3, s, 1, 1, c, dtype=dtype, activation=act, seed=h)
    finally:
        onepath.set_num_threads(old)


@pytest.mark.parametrize("dt", [np.float32, bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("hws", [(7, 7, 1), (5, 6, 1), (14, 14, 2), (12, 10, 2), (40, 40, 2)],
                         ids=str)
def test_depthwise_flat_planes_non_finite_input(level, hws, dt):
    """A NaN or Inf at a row's first or last column (which the flat kernels' neighbouring lanes read
    and then drop) and at the input's last element: NaN / Inf exactly where the float64
    reference has them, the other outputs as before."""
    h, w, s = hws
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    x[0, 1, 2, w - 1] = np.inf
    x[0, 1, 3, 0] = np.nan
    x[1, 0, h - 1, w - 1] = -np.inf
    x[1, 2, h - 1, w - 1] = np.nan
    wt = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    x, wt = x.astype(dt), wt.astype(dt)
    y = np.asarray(onepath.conv2d(x, wt, None, s, 1, 1, 3), np.float64)
    ref = reference_conv2d(np.asarray(x, np.float64), np.asarray(wt, np.float64), None, (s, s),
                           ((1, 1), (1, 1)), (1, 1), 3)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))
    fin = np.isfinite(ref)
    tol = 2e-2 if dt is bfloat16 else 1e-5
    np.testing.assert_allclose(y[fin], ref[fin], rtol=tol, atol=tol)


def test_byte_swapped_operands():
    """'>f4' / '>f8' operands are the same values as float32 / float64 (numpy semantics): the same
    result, twice (the plan cache never runs a byte-swapped array through a native plan)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 4, 7, 7)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    want = onepath.conv2d(x, w, b, padding=1)
    for _ in range(2):
        got = onepath.conv2d(x.astype(">f4"), w.astype(">f4"), b.astype(">f4"), padding=1)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    got = onepath.conv2d(x.astype(">f8"), w, padding=1, dtype=">f8")
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, onepath.conv2d(x.astype(np.float64), w, padding=1), rtol=1e-12)


def test_plan_cache_keeps_checks():
    """A repeated problem takes the cached plan; arguments that parse differently still raise."""
    x = np.ones((1, 4, 5, 5), np.float32)
    w = np.ones((4, 1, 3, 3), np.float32)
    a = onepath.conv2d(x, w, None, 1, 1, 1, 4)
    b = onepath.conv2d(x, w, None, 1, 1, 1, 4)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError):
        onepath.conv2d(x, w, None, True, 1, 1, 4)
    with pytest.raises(TypeError):
        onepath.conv2d(x, w, None, (1, True), 1, 1, 4)
    with pytest.raises(ValueError):
        onepath.conv2d(x, w, None, 1, 1, 1, 4, activation="nope")
    y = onepath.conv2d(x[0], w, None, 1, 1, 1, 4)  # unbatched, cached path too
    y2 = onepath.conv2d(x[0], w, None, 1, 1, 1, 4)
    assert y.shape == y2.shape == (4, 5, 5)
    x1 = np.ones((2, 4, 9), np.float32)
    w1 = np.ones((6, 2, 3), np.float32)
    r1 = onepath.conv1d(x1, w1, None, 1, 1, 1, 2)
    r2 = onepath.conv1d(x1, w1, None, 1, 1, 1, 2)
    np.testing.assert_array_equal(r1, r2)
    assert r1.shape == (2, 6, 9)


# NCHW over the pre-transformed input (padded, stride-phase-split copy; bfloat16 as channel pairs with
# the depth order (kh, kw, c)): odd channel counts, multi-row 16/32-column panels, strides in both
# directions, dilation, asymmetric padding, groups with a per-group bias, depth crossing KC blocks
# in the middle of a tap. OC is small beside OH*OW so that the bfloat16 transform applies.
# (n, c, h, w, oc, kh, kw, stride, padding, dilation, groups)
XP_CASES = [
    (1, 3, 23, 29, 8, 7, 7, 2, 3, 1, 1),                        # conv1-like, C odd
    (2, 5, 13, 40, 6, 3, 3, 1, 1, 1, 1),                        # OW > 32, batch 2
    (1, 6, 11, 9, 4, 3, 3, (2, 3), ((1, 2), (0, 3)), (2, 1), 1),  # asymmetric everything
    (2, 8, 12, 12, 6, 3, 3, 1, 1, 1, 2),                        # grouped (per-group bias)
    (1, 34, 9, 70, 4, 3, 3, 3, 2, 2, 1),                        # stride 3, dilated, 17 pairs
    (1, 40, 33, 35, 8, 3, 3, 2, 1, 1, 1),                       # stride 2, wide rows
    (1, 4, 9, 9, 3, 1, 1, 2, 1, 1, 1),                          # 1x1 strided with padding
    (1, 130, 6, 6, 4, 3, 3, 1, 1, 1, 1),                        # K > KC, a block boundary mid-tap
    (1, 9, 5, 3, 2, 2, 2, 1, 3, 1, 1),                          # padding larger than the kernel
]


# NHWC only: the padded-copy A pack (runs of C/g per tap, or of KW*C per kernel row when dw == 1 and
# groups == 1) cut into 32-depth blocks, copy or no copy of the input
NHWC_CASES = [
    (1, 3, 9, 9, 5, 7, 7, 2, 3, 1, 1),                          # conv1-like: runs of 21 across blocks
    (1, 35, 7, 8, 9, 3, 3, 1, 1, 1, 1),                         # odd C > 32: runs straddle blocks
    (2, 64, 6, 5, 33, 3, 3, 2, 1, 1, 1),                        # C a multiple of 32: one load a block
    (1, 12, 9, 10, 6, 3, 3, 1, 0, (1, 2), 3),                   # grouped, dilated width, no copy
    (1, 6, 8, 9, 4, 2, 3, (1, 2), 0, 1, 1),                     # unpadded, strided: no copy
    (2, 7, 6, 7, 5, 1, 1, 2, 0, 1, 1),                          # 1x1 strided, odd C
    (1, 64, 5, 9, 40, 1, 1, 1, 0, 1, 1),                        # 1x1 in place: A read in place by the
    (1, 2048, 6, 6, 40, 1, 1, 1, 0, 1, 1),                      # AMX kernel (full panels; K > KC)
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
@pytest.mark.parametrize("case", XP_CASES + NHWC_CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_pretransformed(level, case, dtype, layout):
    run_case(*case, dtype=dtype, layout=layout)
    if case[0] == 1 and case[10] == 1:
        run_case(*case, dtype=dtype, layout=layout, bias=False, activation="relu", seed=2)


@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("case", XP_CASES + NHWC_CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_pretransformed_amx_emulated(case, nhwc):
    """The same problems through the amx_emu build (portable packs of the pre-transformed input)."""
    from onepath.kernels import load
    n, c, h, w, oc, kh, kw, s, p, dl, g = case
    st2 = (s, s) if isinstance(s, int) else tuple(s)
    dl2 = (dl, dl) if isinstance(dl, int) else tuple(dl)
    pads = _pads(p, (kh, kw), dl2, st2)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, c, h, w)).astype(bfloat16)
    wt = rng.standard_normal((oc, c // g, kh, kw)).astype(bfloat16)
    b = rng.standard_normal(oc).astype(np.float32)
    oh = (h + pads[0][0] + pads[0][1] - dl2[0] * (kh - 1) - 1) // st2[0] + 1
    ow = (w + pads[1][0] + pads[1][1] - dl2[1] * (kw - 1) - 1) // st2[1] + 1
    mod = load("amx_emu")
    onepath._stats.record("conv2d", "bfloat16", "amx_emu")
    ffi, lib = mod.ffi, mod.lib
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = n, c, h, w, oc, oh, ow, kh, kw
    d.sh, d.sw = st2
    d.pt, d.pl = pads[0][0], pads[1][0]
    d.dh, d.dw = dl2
    d.groups, d.nhwc = g, nhwc
    xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1) if nhwc else x).view(np.uint16)
    wk = np.ascontiguousarray(wt).view(np.uint16)
    y = np.empty((n, oh, ow, oc) if nhwc else (n, oc, oh, ow), np.float32)
    used = lib.op_conv2d_bf16(d, ffi.cast("const uint16_t *", xin.ctypes.data),
                              ffi.cast("const uint16_t *", wk.ctypes.data),
                              ffi.cast("const float *", b.ctypes.data), ffi.cast("float *", y.ctypes.data),
                              0, 0, ffi.NULL, 2)
    assert used >= 1
    ref = reference_conv2d(x, wt, b, st2, pads, dl2, g)
    tol = _bound(x.astype(np.float32), wt.astype(np.float32), b, st2, pads, dl2, g)
    got = y.transpose(0, 3, 1, 2) if nhwc else y
    assert np.all(np.abs(got - ref) <= tol)


def _kernel_bf16(lib, ffi, case, nhwc, y_bf16, seed=13):
    """lib.op_conv2d_bf16 on a case (bias, no activation): (float32 or bfloat16-bits output, x, w, b)."""
    n, c, h, w, oc, kh, kw, s, p, dl, g = case
    st2 = (s, s) if isinstance(s, int) else tuple(s)
    dl2 = (dl, dl) if isinstance(dl, int) else tuple(dl)
    pads = _pads(p, (kh, kw), dl2, st2)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(bfloat16)
    wt = rng.standard_normal((oc, c // g, kh, kw)).astype(bfloat16)
    b = rng.standard_normal(oc).astype(np.float32)
    oh = (h + pads[0][0] + pads[0][1] - dl2[0] * (kh - 1) - 1) // st2[0] + 1
    ow = (w + pads[1][0] + pads[1][1] - dl2[1] * (kw - 1) - 1) // st2[1] + 1
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = n, c, h, w, oc, oh, ow, kh, kw
    d.sh, d.sw = st2
    d.pt, d.pl = pads[0][0], pads[1][0]
    d.dh, d.dw = dl2
    d.groups, d.nhwc = g, nhwc
    xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1) if nhwc else x).view(np.uint16)
    wk = np.ascontiguousarray(wt).view(np.uint16)
    y = np.empty((n, oh, ow, oc) if nhwc else (n, oc, oh, ow), np.uint16 if y_bf16 else np.float32)
    used = lib.op_conv2d_bf16(d, ffi.cast("const uint16_t *", xin.ctypes.data),
                              ffi.cast("const uint16_t *", wk.ctypes.data),
                              ffi.cast("const float *", b.ctypes.data), ffi.cast("void *", y.ctypes.data),
                              y_bf16, 0, ffi.NULL, 2)
    assert used >= 1
    return y


ROUND_CASES = [XP_CASES[0], XP_CASES[3], XP_CASES[7], NHWC_CASES[2], NHWC_CASES[5], NHWC_CASES[6],
               NHWC_CASES[7], BF16_NATIVE_CASES[2]]


def _check_rounded_once(level, case, nhwc):
    from onepath.kernels import load
    mod = load(level)
    onepath._stats.record("conv2d", "bfloat16", level)
    y32 = _kernel_bf16(mod.lib, mod.ffi, case, nhwc, 0)
    y16 = _kernel_bf16(mod.lib, mod.ffi, case, nhwc, 1)
    assert np.array_equal(y16, y32.astype(bfloat16).view(np.uint16))


@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("case", ROUND_CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_bf16_output_rounded_once(level, case, nhwc):
    """A bfloat16 output (y_bf16 = 1: rounded tile by tile in the GEMM driver when the depth is one KC
    block, else from a float32 scratch) is the float32 result rounded once, bit for bit."""
    _check_rounded_once(level, case, nhwc)


@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("case", ROUND_CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_bf16_output_rounded_once_amx_emulated(case, nhwc):
    _check_rounded_once("amx_emu", case, nhwc)


# (n, c, h, w, k, stride, pad, mult): the flat 7x7 kernel, the row kernels (stride 1 and 2), the
# generic padded-plane path (5x5, dilation-free) and its small-plane grid variant
DW_BF16_OUT_CASES = [
    (2, 9, 7, 7, 3, 1, 1, 1),
    (1, 3, 37, 45, 3, 1, 1, 1),
    (1, 4, 14, 14, 3, 2, 1, 2),
    (1, 3, 9, 70, 5, 1, 2, 1),
    (1, 2, 11, 80, 3, 2, 0, 1),
    (1, 3, 7, 14, 3, 1, 1, 1),  # rows of 9..16 columns (zen4: widened plane, two rows per store)
    (1, 3, 9, 14, 3, 2, 1, 1),  # stride 2, rows of <= 16 columns (zen4: 256-bit output rows)
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("act", [None, "relu", "gelu"])
@pytest.mark.parametrize("case", DW_BF16_OUT_CASES, ids=lambda c: "x".join(map(str, c)))
def test_depthwise_bf16_output_is_rounded_f32_result(level, case, act, layout):
    """The depthwise kernel rounds its bfloat16 output in the write-out: bit for bit the float32
    result of the same computation rounded by ml_dtypes (NaN stays NaN, Inf stays Inf)."""
    n, c, h, w, k, s, p, m = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, h, w)).astype(bfloat16)
    x.reshape(-1)[5] = np.inf  # non-finite inputs spread NaN / Inf through their windows
    x.reshape(-1)[-7] = np.nan
    wt = rng.standard_normal((c * m, 1, k, k)).astype(bfloat16)
    b = rng.standard_normal(c * m).astype(np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    kw = dict(stride=s, padding=p, groups=c, layout=layout, activation=act)
    got = onepath.conv2d(x, wt, b, **kw)
    f32 = onepath.conv2d(x, wt, b, dtype=np.float32, **kw)
    assert got.dtype == bfloat16 and f32.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint16), f32.astype(bfloat16).view(np.uint16))
    assert np.isnan(f32).any()


@pytest.mark.parametrize("pads", [((0, 2), (1, 1)), ((2, 0), (1, 1)), ((3, 1), (1, 1))], ids=str)
@pytest.mark.parametrize("w", [9, 10, 16, 17, 25, 33])
def test_depthwise_3x3_rows_top_bottom_padding(level, pads, w):
    """Stride-1 3x3 kernels with padding 1 along W and any padding along H (rows in the padding
    load as zeros). AVX2 builds: the row kernel's first and last vectors (one tap column shifted in
    registers) meet (9, 16 columns), have one inner vector between them (17, 25) or overlap it (25,
    33: 8 does not divide W)."""
    for dtype in (np.float32, bfloat16):
        run_case(1, 3, 8, w, 3, 3, 3, 1, pads, 1, 3, dtype=dtype)
        run_case(1, 3, 8, w, 6, 3, 3, 1, pads, 1, 3, dtype=dtype, activation="relu", seed=5)


# (n, c, h, w, dtype): 3x3 stride 1 padding 1 planes that take each NCHW kernel choice: the flat
# kernel (7x7; bfloat16 17 and 64 columns; float32 rows past the whole-row kernel at batch 2), the
# whole-row and even / odd kernels, the widened bfloat16 rows
DW_INF_CASES = [(1, 2, 7, 7, np.float32), (2, 2, 5, 130, np.float32), (1, 2, 5, 130, np.float32),
                (2, 2, 5, 112, np.float32), (1, 2, 5, 17, bfloat16), (1, 2, 5, 64, bfloat16),
                (1, 2, 5, 80, bfloat16), (2, 3, 6, 40, bfloat16)]


@pytest.mark.parametrize("case", DW_INF_CASES, ids=lambda c: "x".join(map(str, c[:4])) + np.dtype(c[4]).name)
def test_depthwise_inf_border_column_weight_gives_nan_at_the_border(level, case):
    """An infinite weight in kernel column 0 (or 2) meets the left (right) padding zeros: NaN in output
    column 0 (W - 1) of that channel, as in PyTorch and at every level, whichever kernel runs."""
    n, c, h, w, dt = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32).astype(dt)
    for col in (0, 2):
        wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
        wt[0, 0, 1, col] = np.inf
        y = np.asarray(onepath.conv2d(x, wt.astype(dt), None, 1, 1, 1, c), np.float32)
        edge = 0 if col == 0 else w - 1
        assert np.isnan(y[:, 0, :, edge]).all(), (case, col)
        ref = reference_conv2d(np.asarray(x, np.float64), np.asarray(wt.astype(dt), np.float64), None,
                               (1, 1), ((1, 1), (1, 1)), (1, 1), c)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))


@pytest.mark.parametrize("dt", [np.float32, bfloat16], ids=["f32", "bf16"])
def test_depthwise_non_finite_weight_anywhere(level, dt):
    """A non-finite weight at any channel and tap of a many-channel 7x7 call (the per-call scan of
    the weights sees every position, the last partial vector too; op_dw_pad_nan patches the right
    channel) gives NaN exactly where the float64 reference has it, the finite outputs as before."""
    rng = np.random.default_rng(5)
    c = 53  # 477 taps: a partial last vector of 16 (float32) and 32 (bfloat16) lanes
    x = rng.standard_normal((1, c, 7, 7)).astype(np.float32).astype(dt)
    for ch, r, col, v in [(52, 2, 2, np.inf), (17, 0, 0, -np.inf), (33, 1, 2, np.nan),
                          (40, 1, 1, np.inf), (1, 2, 0, np.nan)]:
        wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
        wt[ch, 0, r, col] = v
        y = np.asarray(onepath.conv2d(x, wt.astype(dt), None, 1, 1, 1, c), np.float32)
        ref = reference_conv2d(np.asarray(x, np.float64), np.asarray(wt.astype(dt), np.float64), None,
                               (1, 1), ((1, 1), (1, 1)), (1, 1), c)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=str((ch, r, col, v)))
        fin = ~np.isnan(ref)
        np.testing.assert_allclose(y[fin], ref[fin], rtol=2e-2 if dt is bfloat16 else 1e-5, atol=1e-2 if dt is bfloat16 else 1e-5)


# shapes that reach each 3x3 kernel: flat / narrow rows (7x7), stride-2 narrow (14 -> 7), whole rows
# (28, 112), stride-2 wide rows (56 -> 28), the phase planes, NHWC; with the host's own row-kernel
# choice and with Zen 4's applied to this host (DW_ROW_KERNELS)
DW_NONFINITE_SHAPES = [(7, 7, 1), (14, 14, 2), (28, 28, 1), (6, 112, 1), (56, 56, 2), (13, 30, 2)]


@pytest.mark.parametrize("rows", ["host", "zen4"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dt", [np.float32, bfloat16], ids=["f32", "bf16"])
def test_depthwise_non_finite_weight_every_tap_and_kernel(level, rows, layout, dt, monkeypatch):
    """A non-finite weight at each of the nine taps meets the zero padding on some border (top,
    bottom, left or right): NaN exactly where the float64 reference (and PyTorch) has it, whichever
    3x3 kernel the shape and the microarchitecture's row choice pick."""
    from onepath.dispatch import registry
    from onepath.dispatch.cpu import probe
    from onepath.ops import conv as _c
    if rows == "zen4":   # (the depthwise kernels run from the avx512_core module at every AVX-512 level)
        monkeypatch.setitem(registry.DW_ROW_KERNELS, (probe().uarch, "avx512_core"),
                            registry.DW_ROW_KERNELS[("zen4", "avx512_core")])
    _c._PLANS.clear()
    rng = np.random.default_rng(9)
    c = 4
    try:
        for h, w, s in DW_NONFINITE_SHAPES:
            x = rng.standard_normal((2, c, h, w)).astype(np.float32).astype(dt)
            for tap in range(9):
                wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
                wt[2, 0, tap // 3, tap % 3] = (np.inf, -np.inf, np.nan)[tap % 3]
                xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x
                y = np.asarray(onepath.conv2d(xin, wt.astype(dt), None, s, 1, 1, c, layout=layout), np.float32)
                if layout == "NHWC":
                    y = y.transpose(0, 3, 1, 2)
                ref = reference_conv2d(np.asarray(x, np.float64), np.asarray(wt.astype(dt), np.float64), None,
                                       (s, s), ((1, 1), (1, 1)), (1, 1), c)
                np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=str((h, w, s, tap)))
    finally:
        _c._PLANS.clear()


def test_depthwise_entry_rejects_bf16_output_from_f32_input(level):
    """op_conv2d_dw_f32 has kernels for f32->f32, bf16->f32 and bf16->bf16 only (the promotion
    rules never pair float32 input with a bfloat16 output): the other pairing is refused (-3)."""
    from onepath.kernels import load
    mod = load(level)
    ffi, lib = mod.ffi, mod.lib
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = 1, 4, 6, 6, 4, 6, 6, 3, 3
    d.sh = d.sw = d.dh = d.dw = 1
    d.pt = d.pl = 1
    d.groups, d.nhwc = 4, 0
    x = np.ones((1, 4, 6, 6), np.float32)
    w = np.ones((4, 3, 3), np.float32)
    y = np.zeros((1, 4, 6, 6), np.uint16)
    args = (d, ffi.from_buffer(x), 0, ffi.from_buffer(w), 0, ffi.NULL, ffi.from_buffer(y))
    assert lib.op_conv2d_dw_f32(*args, 1, 0, 1) == -3
    assert not y.any()
    xb = x.astype(bfloat16).view(np.uint16)
    assert lib.op_conv2d_dw_f32(d, ffi.from_buffer(xb), 1, *args[3:], 1, 0, 1) >= 1
    assert np.all(y.view(bfloat16).astype(np.float32)[0, :, 2:4, 2:4] == 9)


# NHWC problems that take the kernels reading A in place (kernels/conv_f32.c, conv_bf16.c): 1x1
# stride 1 (op_conv_ukr_a_*: full 14-row panels in place, the tail packed) and k x k with OW a
# multiple of 14 and C of 16 (op_conv2d_nhwc_brg_f32), with output-channel tails; the odd blocking
# splits K into several blocks. (n, c, h, w, oc, kh, kw, stride, padding)
IN_PLACE_A = [
    (2, 48, 7, 7, 40, 1, 1, 1, 0),       # 1x1: 98 rows, 7 panels
    (1, 64, 5, 6, 33, 1, 1, 1, 0),       # 1x1: 30 rows, 2 panels and a tail
    (1, 300, 4, 7, 40, 1, 1, 1, 0),      # 1x1: K 300 (the far A prefetch at kc > 128)
    (2, 32, 14, 14, 40, 3, 3, 1, 1),     # 3x3 over the pixels of both images
    (1, 16, 28, 28, 33, 3, 3, 2, 1),     # stride 2, C = 16 (kernel-row runs)
    (1, 24, 14, 14, 16, 3, 3, 1, 1),     # C = 24: blocks span two taps, the packing path
]


@pytest.mark.parametrize("case", IN_PLACE_A)
@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
def test_nhwc_a_in_place(level, case, dtype):
    n, c, h, w, oc, kh, kw, s, p = case
    run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout="NHWC", activation="relu", dtype=dtype)


@pytest.mark.parametrize("far", [False, True], ids=["near", "far"])
def test_ukr_a_prefetch_option(level, far):
    """The in-place A micro-kernel's two prefetch schemes (op_conv_f32_options bit 8192,
    registry.CONV_F32_OPTIONS "ukr_a_far_prefetch"), whatever this host ships: prefetches only, the
    same results; NHWC and NCHW 1x1 with K over 128, the NHWC one with a tail panel."""
    from onepath.kernels import load
    lib = load(select_conv("1x1_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(-1)
    lib.op_conv_f32_options((old | 8192) if far else (old & ~8192))
    try:
        assert bool(lib.op_conv_f32_options(-1) & 8192) == far   # the module keeps the bit
        for layout in ("NHWC", "NCHW"):
            run_case(1, 300, 4, 7, 40, 1, 1, 1, 0, 1, 1, layout=layout, activation="relu")
    finally:
        lib.op_conv_f32_options(old)


@pytest.mark.parametrize("opts", [0, 1, 2, 3], ids=["off", "brg_full_k", "brg_nsplit", "both"])
def test_nhwc_brg_options(level, opts):
    """The per-uarch options of the float32 convolutions (registry.CONV_F32_OPTIONS,
    op_conv_f32_options) off and on, whatever this host ships: the batch-reduce k x k kernel over
    several KC blocks or all of K in one; threads over pixel blocks or over output-channel panels
    (the last case: a weight larger than the padded input, an output-channel tail)."""
    from onepath.dispatch import registry
    from onepath.kernels import load
    lib = load(select_conv("implicit_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(opts)
    try:
        for case in IN_PLACE_A[3:5] + [(1, 32, 14, 14, 80, 3, 3, 1, 1)]:
            n, c, h, w, oc, kh, kw, s, p = case
            run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout="NHWC", activation="relu")
    finally:
        lib.op_conv_f32_options(old)
    assert registry.conv_f32_flags("avx512_core", uarch="icelake_server") == 0   # a uarch without a row


# The batch-reduce kernel's padding-tap skips, 7-pixel rows and per-task weight packs
# (op_conv2d_nhwc_brg_f32): borders of panels within a row (OW 14, 28), two-row panels and a ragged
# last panel of 7 pixels (OW 7, 21; a panel across two images at batch 3), stride 2, padding the
# masks do not cover exactly (5x5 padding 2, 3x3 padding 2: the padded copy), no padding, an
# output-channel tail, C 4 / 8 / 12 (a 16-depth block spans taps). (n, c, h, w, oc, kh, kw, stride, padding)
BRG_EDGES = [
    (1, 32, 7, 7, 40, 3, 3, 1, 1),
    (3, 16, 7, 7, 32, 3, 3, 1, 1),
    (1, 16, 7, 21, 32, 3, 3, 1, 1),
    (2, 32, 14, 14, 64, 3, 3, 1, 1),
    (1, 16, 28, 28, 32, 3, 3, 2, 1),
    (1, 16, 14, 14, 32, 5, 5, 1, 2),
    (1, 16, 7, 7, 32, 3, 3, 1, 2),
    (2, 16, 16, 16, 32, 3, 3, 1, 0),
    (2, 512, 6, 6, 24, 3, 3, 2, 1),      # pixels 4 KiB apart: the wide copy (bit 64)
    (1, 8, 13, 13, 32, 2, 2, 1, 1),      # C 4, 8, 12: 16-depth blocks across taps (no skip)
    (1, 4, 13, 13, 32, 2, 2, 1, 1),
    (1, 12, 13, 13, 40, 4, 4, 1, 2),
]


@pytest.mark.parametrize("opts", [3, 79, 95, 111, 12],
                         ids=["old", "ow7_tpack_wide", "skip_pad", "copy", "kc_blocks"])
def test_nhwc_brg_edges(level, opts):
    """op_conv_f32_options bits 4 (OW a multiple of 7), 8 (per-task weight packs in the N split),
    16 (padding taps skipped; on for zen4), 32 (padded copy even when every padding tap is skipped), 64 (pixels 4 KiB
    apart over a wider copy) over BRG_EDGES, NHWC
    with bias and relu, and NCHW (computed through NHWC where the registry says so)."""
    from onepath.kernels import load
    lib = load(select_conv("implicit_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(opts)
    try:
        for i, case in enumerate(BRG_EDGES):
            n, c, h, w, oc, kh, kw, s, p = case
            run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout="NHWC", activation="relu", seed=i)
            if i < 2:
                run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout="NCHW", bias=False, seed=i)
    finally:
        lib.op_conv_f32_options(old)


# The AVX2 direct NHWC route (op_conv_f32_options bit 32768, registry "nhwc_direct8";
# op_conv2d_nhwc_d8_f32): tiles of 6 and 5 pixels across output rows and images (OW 7, 14, 21),
# a 1-4 pixel problem, strides 1-3, dilation, asymmetric and no padding, C not a multiple of 8,
# output-channel tails (OC 5, 40), weight panels packed per task (one pixel range) or once for all,
# K past the 1 MiB panel (blocks, partial sums through the output). (n, c, h, w, oc, kh, kw,
# stride, padding, dilation)
DIRECT8_CASES = [
    (1, 32, 7, 7, 40, 3, 3, 1, 1, 1),
    (3, 16, 7, 7, 32, 3, 3, 1, 1, 1),
    (1, 16, 7, 21, 5, 3, 3, 1, 1, 1),
    (2, 24, 14, 14, 64, 3, 3, 2, 1, 1),
    (1, 17, 13, 11, 18, 5, 5, 1, 2, 1),
    (1, 20, 12, 13, 33, 3, 3, 3, 0, 2),
    (2, 16, 9, 9, 16, 2, 2, 1, (0, 1), 1),
    (1, 16, 3, 3, 16, 3, 3, 1, 0, 1),
    (4, 16, 30, 30, 24, 3, 3, 1, 1, 1),
    (1, 2000, 5, 5, 20, 3, 3, 1, 1, 1),
    (2, 64, 9, 10, 70, 1, 1, 1, 0, 1),     # 1x1
    (2, 32, 13, 14, 24, 1, 1, 2, 0, 1),    # 1x1 strided onto 7 x 7 (the route) and 8 x 8 (not)
    (1, 32, 15, 15, 24, 1, 1, 2, 0, 1),
]


@pytest.mark.parametrize("threads", [1, 2])
def test_nhwc_direct8(level, threads):
    """Bit 32768 forced on over DIRECT8_CASES, NHWC with and without bias, every activation (the
    last block's epilogue), float32 and a bfloat16 input (widened into the padded copy), at 1 and
    2 threads: within the reference's bound; the same bits at 1 and 2 threads (threads split the
    pixels, never K). Only the avx2 module has the route (the bit does nothing elsewhere)."""
    from onepath.kernels import load
    lib = load(select_conv("implicit_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(-1)
    nthreads = onepath.get_num_threads()
    acts = [None, "relu", "gelu", "silu", "gelu_tanh"]
    try:
        lib.op_conv_f32_options(old | 32768)
        onepath.set_num_threads(threads)
        for i, (n, c, h, w, oc, kh, kw, s, p, dl) in enumerate(DIRECT8_CASES):
            run_case(n, c, h, w, oc, kh, kw, s, p, dl, 1, layout="NHWC", bias=i % 2 == 0,
                     activation=acts[i % len(acts)], seed=i)
        run_case(2, 24, 10, 9, 37, 3, 3, 1, 1, 1, 1, layout="NHWC", dtype=bfloat16, seed=3)
        # K past the panel with a bias and no activation / relu: whole 16-channel tiles start from
        # the bias or the partial sums in y and go straight back to y, the 4-channel tail through
        # the buffer
        for act in (None, "relu"):
            run_case(1, 2000, 4, 5, 36, 3, 3, 1, 1, 1, 1, layout="NHWC", bias=True, activation=act,
                     seed=11)
        rng = np.random.default_rng(5)
        x = rng.standard_normal((2, 11, 13, 48)).astype(np.float32)
        wt = rng.standard_normal((40, 48, 3, 3)).astype(np.float32)
        got = []
        for t in (1, 2):
            onepath.set_num_threads(t)
            got.append(onepath.conv2d(x, wt, None, 1, 1, layout="NHWC", activation="relu"))
        assert got[0].tobytes() == got[1].tobytes()
    finally:
        lib.op_conv_f32_options(old)
        onepath.set_num_threads(nthreads)


def test_nhwc_direct8_nonfinite(level):
    """Bit 32768: an Inf weight multiplies the padded copy's zeros (NaN at the borders, as on the
    im2col route), an Inf / NaN input spreads to exactly the outputs whose window holds it."""
    from onepath.kernels import load
    lib = load(select_conv("implicit_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(-1)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 9, 10, 16)).astype(np.float32)
    wt = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
    try:
        out = []
        for o in (old & ~32768, old | 32768):
            lib.op_conv_f32_options(o)
            w1 = wt.copy()
            w1[3, 2, 0, 0] = np.inf
            x1 = x.copy()
            x1[0, 4, 5, 7] = np.nan
            out.append(onepath.conv2d(x1, w1, None, 1, 1, layout="NHWC"))
        np.testing.assert_array_equal(np.isnan(out[0]), np.isnan(out[1]))
        np.testing.assert_array_equal(np.isinf(out[0]), np.isinf(out[1]))
        assert np.isnan(out[1][0, 0, :, 3]).all() and np.isnan(out[1][0, 3:6, 4:7]).all()
    finally:
        lib.op_conv_f32_options(old)

def _brg_lib():
    from onepath.kernels import load
    row = select_conv("implicit_gemm", "float32")
    if row.level not in ("avx512_core", "avx512_core_bf16", "avx512_core_amx"):
        pytest.skip("the batch-reduce kernel is AVX-512 only")
    return load(row.level).lib


def test_nhwc_brg_skips_padding_taps():
    """Bit 16 skips the padding taps (as oneDNN's brgconv) only in the weight panels whose weights
    are all finite: an infinite weight at tap (0, 0) of every channel gives NaN outputs in the top
    row and left column (0 * inf) with the skip as without it, as at every other level, OW 14 and 7,
    the input read in place (15 + 16) or from the padded copy (+ 32)."""
    lib = _brg_lib()
    rng = np.random.default_rng(0)
    for opts in (31, 63, 15):
        old = lib.op_conv_f32_options(opts)
        try:
            for hw in (14, 7):
                x = rng.standard_normal((1, hw, hw, 32)).astype(np.float32)
                wt = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
                wt[:, :, 0, 0] = np.inf
                y = onepath.conv2d(x, wt, None, 1, 1, layout="NHWC")
                assert np.isnan(y[0, 1:, 1:]).all()
                assert np.isnan(y[0, 0]).all() and np.isnan(y[0, :, 0]).all(), opts
        finally:
            lib.op_conv_f32_options(old)


def test_nhwc_brg_skip_one_nonfinite_panel():
    """One Inf weight (output channel 37: the second 32-column panel of 136): with the padding-tap
    skip (bit 16) that channel's top row and left column are NaN (0 * Inf) and its other outputs
    infinite, and every output is bit for bit the run without the skip: the input read in place
    (the Inf panel redone over a padded copy), with a shared or per-task weight pack, and the
    padded copy (bit 32); NHWC with bias and relu, and NCHW."""
    lib = _brg_lib()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 14, 14, 64)).astype(np.float32)
    wt = rng.standard_normal((136, 64, 3, 3)).astype(np.float32)
    wt[37, 5, 0, 0] = np.inf
    b = rng.standard_normal(136).astype(np.float32)
    xc = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    old = lib.op_conv_f32_options(-1)
    try:
        for opts in (1, 11, 33):
            out = []
            for o in (opts, opts | 16):
                lib.op_conv_f32_options(o)
                out.append([onepath.conv2d(x, wt, b, 1, 1, layout="NHWC", activation="relu"),
                            onepath.conv2d(xc, wt, None, 1, 1, layout="NCHW")])
            for a, c in zip(*out):
                assert a.tobytes() == c.tobytes(), opts
            y = out[1][1][0, 37]
            assert np.isnan(y[0]).all() and np.isnan(y[:, 0]).all() and np.isinf(y[1:, 1:]).all()
            assert np.isfinite(np.delete(out[1][1], 37, axis=1)).all()
    finally:
        lib.op_conv_f32_options(old)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
@pytest.mark.parametrize("groups", [1, 32], ids=["dense", "depthwise"])
def test_large_results_start_on_a_cache_line(level, layout, dtype, groups):
    """conv2d's docstring: an accelerated result of 1 MiB or more starts on a 64-byte boundary
    (the depthwise route and the dense route's bfloat16 write-out allocated with np.empty, 16 bytes
    past a line: found by the fresh-user review), and is the same array as the float64 check."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 32, 128, 128)).astype(np.float32).astype(dtype)  # bf16 out: 1 MiB
    w = rng.standard_normal((32, 32 // groups, 3, 3)).astype(np.float32).astype(dtype)
    xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x
    y = onepath.conv2d(xin, w, None, 1, 1, 1, groups, layout=layout)
    assert y.dtype == dtype and y.nbytes >= 1 << 20
    assert y.ctypes.data % 64 == 0, (layout, np.dtype(dtype).name, groups, y.ctypes.data % 64)
    got = np.asarray(y, np.float64)
    if layout == "NHWC":
        got = got.transpose(0, 3, 1, 2)
    ref = reference_conv2d(np.asarray(x, np.float64), np.asarray(w, np.float64), None, (1, 1),
                           ((1, 1), (1, 1)), (1, 1), groups)
    np.testing.assert_allclose(got, ref, rtol=2e-2 if dtype is bfloat16 else 1e-4,
                               atol=5e-2 if dtype is bfloat16 else 1e-4)
