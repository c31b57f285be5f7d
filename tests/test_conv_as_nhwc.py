"""NCHW convolutions computed in the NHWC formulation (registry.CONV_NCHW_AS_NHWC, op_conv_desc.nhwc
= 2), forced at every ISA level whatever the host's own row says, against the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import LEVELS, registry
from onepath.dispatch.cpu import probe
from onepath.ops import conv as _conv

from test_conv import run_case


@pytest.fixture
def as_nhwc(monkeypatch):
    """Every level of this host's uarch takes the NHWC formulation for NCHW implicit GEMMs (and
    the NCHW 1x1 joint GEMM and weight-in-place GEMM, op_conv_f32_options bits 512 and 1024, which
    would replace it, are off)."""
    from onepath.kernels import load
    big = {"kxk": 1 << 30, "1x1_batch": 1 << 30, "1x1_stride": 1 << 30, "1x1_single": 1 << 30}
    table = {(probe().uarch, lv): big for lv in LEVELS}
    monkeypatch.setattr(registry, "CONV_NCHW_AS_NHWC", table)
    libs = [load(lv).lib for lv in onepath.available_isas()]
    olds = [lib.op_conv_f32_options(-1) for lib in libs]
    for lib, old in zip(libs, olds):
        lib.op_conv_f32_options(old & ~(512 | 1024))
    _conv._PLANS.clear()
    yield
    for lib, old in zip(libs, olds):
        lib.op_conv_f32_options(old)
    _conv._PLANS.clear()


# (n, c, h, w, oc, kh, kw, stride, padding, dilation)
CASES = [
    (2, 6, 9, 11, 5, 3, 3, 1, 1, 1),       # C, OC not multiples of any vector width
    (1, 3, 17, 15, 16, 7, 7, 2, 3, 1),     # conv1-like
    (1, 40, 7, 7, 33, 3, 3, 2, 1, 2),      # stride and dilation, more than 32 channels
    (3, 20, 5, 6, 17, 3, 3, 1, 1, 1),      # a batch: one GEMM over the pixels of all images
    (2, 64, 8, 9, 40, 3, 3, 1, 1, 1),      # C a multiple of 32, stride 1: the AMX level's amx_s1 behind the transposes
    (2, 32, 9, 9, 24, 3, 3, 2, 1, 1),      # the same channels, strided
    (2, 24, 7, 7, 40, 1, 1, 1, 0, 1),      # 1x1 with a batch
    (1, 24, 7, 7, 40, 1, 1, 1, 0, 1),      # 1x1 at batch 1 ("1x1_single": M = 49 rows, a 7-row tail)
    (3, 16, 9, 8, 8, 1, 1, 2, 0, 1),       # 1x1 stride 2 with a batch: the sampled pixels only
    (1, 16, 9, 8, 8, 1, 1, (3, 2), 0, 1),  # 1x1 strides 3, 2 at batch 1
    (1, 16, 9, 8, 8, 1, 1, 2, 1, 1),       # 1x1 stride 2 with padding (border pixels = bias)
    (2, 16, 8, 8, 8, 1, 1, 2, ((0, 1), (0, 1)), 1),  # bottom/right padding: a sampled pixel in it
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [np.float32, bfloat16])
def test_nchw_as_nhwc_every_level(level, as_nhwc, case, dtype):
    n, c, h, w, oc, kh, kw, s, p, d = case
    run_case(n, c, h, w, oc, kh, kw, s, p, d, 1, bias=True, activation="relu", dtype=dtype)
    plans = [pl for pl in _conv._PLANS.values() if not pl.nhwc]
    assert plans and all(pl.desc.nhwc == 2 for pl in plans)


def test_nchw_as_nhwc_mixed_dtypes(level, as_nhwc):
    """bfloat16 input with a float32 weight (the widening rows) and a float32 result."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 8, 9)).astype(bfloat16)
    w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    got = onepath.conv2d(x, w, padding=1)
    assert got.dtype == np.float32
    ref = _conv.reference_conv2d(x, w, None, (1, 1), ((1, 1), (1, 1)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    got = onepath.conv2d(x, w.astype(bfloat16), padding=1, dtype=np.float32)
    ref = _conv.reference_conv2d(x, w.astype(bfloat16), None, (1, 1), ((1, 1), (1, 1)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_rule_is_per_uarch():
    """Only the listed (uarch, level) pairs take it, up to the listed output sizes."""
    row = _conv.select_conv("implicit_gemm", "float32", level="generic")
    row = registry.replace(row, level="avx512_core")
    lim = registry.CONV_NCHW_AS_NHWC[("zen4", "avx512_core")]
    assert registry.conv_nchw_as_nhwc(row, 1, lim["kxk"], True, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 1, lim["kxk"] + 1, True, uarch="zen4")
    assert registry.conv_nchw_as_nhwc(row, 1, lim["kxk_stride1"], uarch="zen4")   # stride 1
    assert not registry.conv_nchw_as_nhwc(row, 1, lim["kxk_stride1"] + 1, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 1, 49, uarch="icelake_server")   # no row
    assert registry.conv_nchw_as_nhwc(row, 1, 49, uarch="sapphirerapids")       # float32: zen4's limits
    one = registry.replace(row, algorithm="1x1_gemm")
    assert registry.conv_nchw_as_nhwc(one, 1, 49, uarch="zen4")        # "1x1_single" (7x7)
    assert not registry.conv_nchw_as_nhwc(one, 1, 196, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(one, 1, 49, uarch="icelake_server")
    assert registry.conv_nchw_as_nhwc(one, 8, 49, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(one, 8, 196, uarch="zen4")
    assert registry.conv_nchw_as_nhwc(one, 1, 784, True, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(one, 1, 785, True, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(registry.replace(row, algorithm="grouped"), 8, 49, uarch="zen4")


def test_small_planes_same_bits_alone_and_in_a_batch_nchw(level):
    """NCHW bfloat16 k x k convolutions with output planes of fewer than 16 pixels give every image
    the same bits alone as inside the batch, at every level (CONV_NCHW_AS_NHWC "min_pixels" keeps
    them off the NHWC formulation at the AMX level, whose GEMM picks its kernel from the pixels of
    all images together)."""
    rng = np.random.default_rng(0)
    for (h, s, p) in [(6, 2, 1), (3, 1, 1), (2, 1, 1)]:
        x = rng.standard_normal((4, 32, h, h)).astype(bfloat16)
        w = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(bfloat16)
        kw = dict(stride=s, padding=p, dtype=np.float32)
        yb = onepath.conv2d(x, w, **kw)
        ys = np.concatenate([onepath.conv2d(x[i:i + 1], w, **kw) for i in range(4)])
        np.testing.assert_array_equal(yb, ys, err_msg=str((h, s, p)))


# (h, kernel, stride, padding): float32 NCHW planes on both sides of every CONV_NCHW_AS_NHWC limit
# the shipped rows use (49, 196, 784, 3136 output pixels), 3x3 and 1x1, stride 1 and 2
_BOUNDARY_CASES = [(h, 3, 1, 1) for h in (7, 8, 14, 15, 28, 29, 56, 57)] + \
                  [(h, 3, 2, 1) for h in (14, 16, 28, 30, 56, 58, 80, 112, 114)] + \
                  [(h, 1, 1, 0) for h in (7, 8, 14, 15, 28)] + \
                  [(h, 1, 2, 0) for h in (14, 16, 28, 30, 56, 58)]


@pytest.mark.parametrize("case", _BOUNDARY_CASES, ids=lambda c: "h%dk%ds%d" % c[:3])
def test_same_bits_alone_and_in_a_batch_f32(level, case):
    """With this host's own rules (CONV_NCHW_AS_NHWC, and the kernels' options that replace the
    NHWC formulation from batch 2), every image of an NCHW float32 batch gets the same bits alone as
    inside the batch, as onepath.dask's batch chunks promise: the zen3 row once sent a strided plane
    of 785-3136 pixels, and with "1x1_single" a 7 x 7 1x1, NCHW alone and NHWC or the joint GEMM in
    a batch (found by review)."""
    h, k, s, p = case
    rng = np.random.default_rng(h * 10 + k + s)
    x = rng.standard_normal((2, 16, h, h)).astype(np.float32)
    w = (rng.standard_normal((8, 16, k, k)) / 4).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    yb = onepath.conv2d(x, w, b, stride=s, padding=p)
    ys = np.concatenate([onepath.conv2d(x[i:i + 1], w, b, stride=s, padding=p) for i in range(2)])
    np.testing.assert_array_equal(yb, ys)


@pytest.mark.parametrize("oc", [1, 4, 6, 8, 14, 15])
@pytest.mark.parametrize("c,h,s", [(33, 14, 1), (64, 7, 1), (64, 14, 2)],
                         ids=["c33h14", "c64h7", "c64h14s2"])
def test_narrow_1x1_same_bits_alone_and_in_a_batch_f32(level, oc, c, h, s):
    """NCHW float32 1x1 convolutions with at most MR output channels: an image alone reads B in
    place with KC 32 (the GEMM's direct path), so the joint GEMM over a batch's pixels (CONV_F32
    options "nchw1x1_joint", shipped for zen3, zen4, sapphirerapids) summed K > 32 in other blocks:
    4 x 33 x 14 x 14 at batch 2 differed in 142 of 1568 outputs (found by review). Such layers now
    keep the per-image GEMM in a batch (op_conv_j1_fits)."""
    rng = np.random.default_rng(oc * 100 + c + h)
    x = rng.standard_normal((3, c, h, h)).astype(np.float32)
    w = rng.standard_normal((oc, c, 1, 1)).astype(np.float32)
    yb = onepath.conv2d(x, w, stride=s)
    ys = np.concatenate([onepath.conv2d(x[i:i + 1], w, stride=s) for i in range(3)])
    np.testing.assert_array_equal(yb.view(np.uint32), ys.view(np.uint32))
