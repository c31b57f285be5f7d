"""The bfloat16 NHWC batch-reduce k x k kernel (kernels/conv_bf16.c, op_conv2d_nhwc_brg_bf16; the
registry's CONV_BF16_OPTIONS "brg"), forced on and off at every level whatever this host ships,
against the float64 reference, and bit for bit against the NHWC GEMM path it replaces."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry
from onepath.ops.conv import reference_conv2d, select_conv

from bf16_options import assert_same_bits, conv_bf16_lib
from test_conv import run_case

# (n, c, h, w, oc, kh, kw, stride, padding)
CASES = [
    (2, 64, 14, 14, 40, 3, 3, 1, 1),                # 14-pixel panels in a row, an OC tail, batch 2
    (3, 32, 7, 7, 70, 3, 3, 1, 1),                  # OW 7: half panels paired across images, one alone
    (1, 64, 9, 14, 33, 3, 3, 2, ((2, 0), (1, 1))),  # stride 2, asymmetric padding
    (1, 64, 7, 7, 32, 3, 3, 1, 3),                  # output rows with no valid kernel row (bias only)
    (1, 64, 8, 14, 16, 5, 5, 1, 2),                 # 5x5
    (2, 64, 14, 7, 24, 1, 1, 1, 0),                 # 1x1
    (1, 33, 7, 7, 8, 3, 3, 1, 1),                   # odd C: the GEMM path
    (1, 64, 7, 7, 136, 3, 3, 1, 1),                 # weight > input: threads split OC (nsplit, tail panel)
    (2, 64, 14, 14, 24, 3, 3, 2, ((0, 1), (0, 1))), # bottom / right padding only (read in place, no shift)
]


@pytest.fixture(params=[0, 1, 3, 7, 19, 23], ids=["off", "brg", "brg_skip_pad", "brg_skip_pad_nsplit_pack",
                                                "brg_skip_pad_inplace", "brg_skip_pad_nsplit_pack_inplace"])
def brg(request, level):
    lib = conv_bf16_lib()
    old = lib.op_conv_bf16_options(request.param)
    yield request.param
    lib.op_conv_bf16_options(old)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_brg_bf16(level, brg, case):
    n, c, h, w, oc, kh, kw, s, p = case
    run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout="NHWC", activation="relu", dtype=bfloat16)
    run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout="NCHW", bias=False, dtype=bfloat16)


def test_brg_bf16_matches_gemm_path_with_nan_inf():
    """Same K-pair order as the GEMM path (skipped padding taps only ever added exact zeros): bit for
    bit equal outputs with and without the padding skip, float32 and bfloat16, NaN and Inf inputs
    included. Both on the VDPBF16PS kernels: on an AMX host at the avx512_core_bf16 cap (uncapped, the
    GEMM path runs the AMX tiles, whose products round otherwise)."""
    cap = onepath.max_isa("avx512_core_bf16") if onepath.isa() == "avx512_core_amx" else contextlib.nullcontext()
    with cap:
        _brg_same_bits_nan_inf()


def _brg_same_bits_nan_inf():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 7, 14, 64)).astype(np.float32)
    x[0, 3, 4, 5], x[1, 0, 0, 7], x[1, 6, 13, 63] = np.nan, np.inf, -np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((40, 64, 3, 3)).astype(bfloat16)
    b = rng.standard_normal(40).astype(np.float32)
    assert_same_bits((0, 1, 3, 7, 19, 23),
                     lambda: [onepath.conv2d(x, wt, b, padding=1, layout="NHWC", activation="relu", dtype=dt)
                              for dt in (np.float32, bfloat16)], nan_index=1)


@pytest.mark.parametrize("opt", [None, 3, 19], ids=["shipped", "brg_skip_pad", "brg_skip_pad_inplace"])
def test_non_finite_weight_reaches_the_borders_at_every_level(level, opt):
    """An infinite weight at tap (0, 0) gives the same NaN outputs at every level and in both layouts
    and dtypes, the generic level's: the padding taps are computed (0 * inf = NaN), also with the
    padding skip on (a weight panel with a non-finite weight runs every kernel row)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    wt = rng.standard_normal((32, 64, 3, 3)).astype(np.float32)
    wt[:, :, 0, 0] = np.inf
    lib = conv_bf16_lib()
    old = lib.op_conv_bf16_options(-1 if opt is None else opt)
    try:
        _borders_nan(x, wt)
    finally:
        lib.op_conv_bf16_options(old)


def _borders_nan(x, wt):
    for dt in (np.float32, bfloat16):
        xd, wd = x.astype(dt), wt.astype(dt)
        for layout in ("NCHW", "NHWC"):
            xi = xd if layout == "NCHW" else np.ascontiguousarray(xd.transpose(0, 2, 3, 1))
            y = np.asarray(onepath.conv2d(xi, wd, None, 1, 1, layout=layout), np.float32)
            if layout == "NHWC":
                y = y.transpose(0, 3, 1, 2)
            assert np.isnan(y[0, :, 1:, 1:]).all() and np.isfinite(y[0, :, 0, :]).sum() == 0, (dt, layout)
            assert np.isfinite(y[0, :, :, 0]).sum() == 0, (dt, layout)


@pytest.mark.parametrize("stride", [1, 2])
def test_skip_pad_is_per_weight_panel(level, brg, stride):
    """An infinite weight of output channel 5 at kernel row 2 (the first 32-column panel only): that
    channel's outputs are non-finite, NaN (0 * Inf) in its bottom row where that row reads the
    padding (stride 1), every other channel
    finite and right, with the padding skip on or off (the brg fixture), at every level, as the
    float64 reference gives them."""
    rng = np.random.default_rng(4)
    h = 7 * stride
    x = rng.standard_normal((2, 64, h, h)).astype(bfloat16)
    wt = rng.standard_normal((128, 64, 3, 3)).astype(np.float32)   # 4 panels: the OC split at 2 threads
    wt[5, 7, 2, 1] = -np.inf
    wt = wt.astype(bfloat16)
    ref = reference_conv2d(x, wt, None, (stride, stride), ((1, 1), (1, 1)))
    for layout in ("NCHW", "NHWC"):
        xi = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        y = np.asarray(onepath.conv2d(xi, wt, None, stride, 1, layout=layout, dtype=np.float32))
        if layout == "NHWC":
            y = y.transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref))
        assert not np.isfinite(y[:, 5]).any() and np.isnan(y[:, 5, -1]).all() == (stride == 1)
        fin = np.ones(128, bool)
        fin[5] = False
        np.testing.assert_allclose(y[:, fin], ref[:, fin], rtol=1e-2, atol=0.1)


def test_brg_rule_is_per_uarch():
    # brg, skip_pad, nsplit_pack, 1x1_out16, brg_inplace, 1x1_strided_ref, 1x1_out16_conv, as_nhwc_image,
    # as_nhwc_image_l2, nchw1x1_joint, brg_nsplit_small
    assert registry.conv_bf16_flags("avx512_core_bf16", uarch="zen4") == 2047
    assert registry.conv_bf16_flags("avx512_core_amx", uarch="sapphirerapids") == (
        registry.CONV_BF16_FLAGS["amx_s1"] | registry.CONV_BF16_FLAGS["amx_stem"] | registry.CONV_BF16_FLAGS["amx_s2"])


def test_res2_plane_nchw_route_on_zen4(level):
    """zen4 bfloat16 (CONV_NCHW_AS_NHWC "kxk_stride1" 784): an NCHW 3x3 stride-1 convolution with a
    28 x 28 output runs in the NHWC formulation there, a 56 x 56 one (res2_branch2b's plane) at
    batch 1 (at a batch: "kxk_batch", test_conv_as_nhwc_image_bf16.py) and hosts without a row keep
    the NCHW GEMM; with few channels the 56 x 56 plane is checked against the float64 reference at
    every level."""
    row = registry.replace(select_conv("implicit_gemm", "bfloat16", level="generic"), level="avx512_core_bf16")
    assert registry.conv_nchw_as_nhwc(row, 8, 28 * 28, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 1, 56 * 56, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 1, 56 * 56, True, uarch="zen4")   # strided: "kxk" 784
    assert not registry.conv_nchw_as_nhwc(row, 8, 56 * 56, uarch="sapphirerapids")
    run_case(1, 32, 56, 56, 32, 3, 3, 1, 1, 1, 1, bias=True, activation="relu", dtype=bfloat16)
