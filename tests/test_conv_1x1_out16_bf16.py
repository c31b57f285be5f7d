"""The bfloat16 NHWC 1x1 stride-1 convolution with its output written as bfloat16 from the GEMM
kernel's registers (kernels/conv_bf16.c, op_conv_bf16_options bit 8; the registry's
CONV_BF16_OPTIONS "1x1_out16"), forced on and off at every level, against the float64 reference
and bit for bit against the float-tile path it replaces."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.kernels import load
from onepath.ops.conv import select_conv

from test_conv import run_case

OUT16 = 8
# (n, c, h, w, oc, groups): 14-row panels with a row tail and an OC tail; per-group calls (bias)
# with C / groups = 32; C 48 (not a multiple of 32: the float-tile path)
CASES = [(2, 64, 5, 7, 40, 1), (1, 64, 3, 5, 48, 2), (1, 48, 4, 4, 24, 1)]


def _lib():
    return load(select_conv("1x1_gemm", "bfloat16").level).lib


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_1x1_out16(level, case):
    n, c, h, w, oc, g = case
    lib = _lib()
    old = lib.op_conv_bf16_options(-1)
    try:
        lib.op_conv_bf16_options(old | OUT16)
        run_case(n, c, h, w, oc, 1, 1, 1, 0, 1, g, layout="NHWC", activation="relu", dtype=bfloat16)
    finally:
        lib.op_conv_bf16_options(old)


def test_1x1_out16_same_bits_with_nan_inf():
    """On and off give the same bits (bias, ReLU, NaN and Inf inputs, float32 and bfloat16 output)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 7, 64)).astype(np.float32)
    x[0, 1, 2, 3], x[1, 5, 6, 63] = np.nan, np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((72, 64, 1, 1)).astype(bfloat16)
    b = rng.standard_normal(72).astype(np.float32)
    lib = _lib()
    old = lib.op_conv_bf16_options(-1)
    try:
        out = {}
        for opt in (old & ~OUT16, old | OUT16):
            lib.op_conv_bf16_options(opt)
            out[opt] = [onepath.conv2d(x, wt, bb, layout="NHWC", activation=act, dtype=dt)
                        for dt in (np.float32, bfloat16) for bb, act in ((None, None), (b, "relu"))]
    finally:
        lib.op_conv_bf16_options(old)
    a, c = out.values()
    for u, v in zip(a, c):
        np.testing.assert_array_equal(np.asarray(u, np.float32), np.asarray(v, np.float32))
    assert np.isnan(np.asarray(a[1], np.float32)).any()
