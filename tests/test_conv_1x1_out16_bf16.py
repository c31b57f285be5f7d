"""The bfloat16 NHWC 1x1 stride-1 convolution with its output written as bfloat16 from the GEMM
kernel's registers (kernels/conv_bf16.c, op_conv_bf16_options bit 8; the registry's
CONV_BF16_OPTIONS "1x1_out16"), forced on and off at every level, against the float64 reference
and bit for bit against the float-tile path it replaces."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath

from bf16_options import assert_same_bits, bf16_options, shipped_bf16_options
from test_conv import run_case

OUT16 = 8
# (n, c, h, w, oc, groups): 14-row panels with a row tail and an OC tail; per-group calls (bias)
# with C / groups = 32; C 48 (not a multiple of 32: the float-tile path)
CASES = [(2, 64, 5, 7, 40, 1), (1, 64, 3, 5, 48, 2), (1, 48, 4, 4, 24, 1)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_1x1_out16(level, case):
    n, c, h, w, oc, g = case
    with bf16_options(shipped_bf16_options() | OUT16):
        run_case(n, c, h, w, oc, 1, 1, 1, 0, 1, g, layout="NHWC", activation="relu", dtype=bfloat16)


def test_1x1_out16_same_bits_with_nan_inf():
    """On and off give the same bits (bias, ReLU, NaN and Inf inputs, float32 and bfloat16 output)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 7, 64)).astype(np.float32)
    x[0, 1, 2, 3], x[1, 5, 6, 63] = np.nan, np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((72, 64, 1, 1)).astype(bfloat16)
    b = rng.standard_normal(72).astype(np.float32)
    old = shipped_bf16_options()
    assert_same_bits((old & ~OUT16, old | OUT16),
                     lambda: [onepath.conv2d(x, wt, bb, layout="NHWC", activation=act, dtype=dt)
                              for dt in (np.float32, bfloat16) for bb, act in ((None, None), (b, "relu"))],
                     nan_index=1)
