"""The bfloat16 NHWC strided 1x1 convolution as one GEMM over its sampled pixels read in place
(kernels/conv_bf16.c, op_conv_bf16_options bit 32; the registry's CONV_BF16_OPTIONS
"1x1_strided_ref"), forced on at every level against the float64 reference, and bit for bit against
the paths it replaces (the batch-reduce kernel, the GEMM over a gathered copy)."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath

from bf16_options import assert_same_bits, bf16_options, shipped_bf16_options
from test_conv import run_case

STRIDED_REF = 32
BRG = 1
# (n, c, h, w, oc, stride): OW 14 at batch 2 with an OC tail, odd H and W (OH 15: an MC block tail),
# a stride (2, 1); OW 7 and C 48 (not taken: the other paths)
CASES = [(2, 64, 28, 28, 40, 2), (1, 32, 29, 27, 64, 2), (1, 64, 5, 14, 32, (2, 1)), (2, 64, 14, 14, 32, 2),
         (1, 48, 28, 28, 32, 2)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_1x1_strided_ref(level, case):
    n, c, h, w, oc, s = case
    with bf16_options(shipped_bf16_options() | STRIDED_REF):
        run_case(n, c, h, w, oc, 1, 1, s, 0, 1, 1, layout="NHWC", activation="relu", dtype=bfloat16)


def test_1x1_strided_ref_same_bits_with_nan_inf():
    """On, off (batch-reduce kernel) and off without it (gathered GEMM) give the same bits (bias,
    ReLU, NaN and Inf inputs, float32 and bfloat16 output, batch 1 and 2). All on the VDPBF16PS
    kernels: on an AMX host at the avx512_core_bf16 cap (uncapped, the gathered GEMM runs the AMX
    tiles, whose products round otherwise)."""
    cap = onepath.max_isa("avx512_core_bf16") if onepath.isa() == "avx512_core_amx" else contextlib.nullcontext()
    with cap:
        _strided_ref_same_bits()


def _strided_ref_same_bits():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 28, 28, 64)).astype(np.float32)
    x[0, 2, 4, 3], x[1, 26, 26, 63] = np.nan, np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((72, 64, 1, 1)).astype(bfloat16)
    b = rng.standard_normal(72).astype(np.float32)
    old = shipped_bf16_options()
    assert_same_bits((old | STRIDED_REF | BRG, (old | BRG) & ~STRIDED_REF, old & ~(STRIDED_REF | BRG)),
                     lambda: [onepath.conv2d(xx, wt, bb, stride=2, layout="NHWC", activation=act, dtype=dt)
                              for xx in (x, x[:1]) for dt in (np.float32, bfloat16)
                              for bb, act in ((None, None), (b, "relu"))])


# The NHWC 1x1 stride-1 bfloat16-output path's own panel kernel (op_conv_bf16_options bit 64, the
# registry's "1x1_out16_conv", on top of "1x1_out16", bit 8)
OUT16, OUT16_CONV = 8, 64
# (n, c, h, w, oc, groups): full 14-row panels and a row tail, an OC tail; per-group calls (bias)
CASES_S1 = [(2, 64, 5, 7, 40, 1), (1, 64, 3, 5, 48, 2), (1, 96, 6, 7, 32, 1)]


@pytest.mark.parametrize("case", CASES_S1, ids=lambda c: "x".join(map(str, c)))
def test_1x1_out16_conv(level, case):
    n, c, h, w, oc, g = case
    with bf16_options(shipped_bf16_options() | OUT16 | OUT16_CONV):
        run_case(n, c, h, w, oc, 1, 1, 1, 0, 1, g, layout="NHWC", activation="relu", dtype=bfloat16)


def test_1x1_out16_conv_same_bits_with_nan_inf():
    """The conv panel kernel, the GEMM's and the float-tile path give the same bits (bias, ReLU, NaN
    and Inf inputs, bfloat16 and float32 output)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 7, 8, 64)).astype(np.float32)
    x[0, 1, 2, 3], x[1, 6, 7, 63] = np.nan, np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((72, 64, 1, 1)).astype(bfloat16)
    b = rng.standard_normal(72).astype(np.float32)
    old = shipped_bf16_options()
    assert_same_bits((old | OUT16 | OUT16_CONV, (old | OUT16) & ~OUT16_CONV, old & ~(OUT16 | OUT16_CONV)),
                     lambda: [onepath.conv2d(x, wt, bb, layout="NHWC", activation=act, dtype=dt)
                              for dt in (bfloat16, np.float32) for bb, act in ((None, None), (b, "relu"))])
