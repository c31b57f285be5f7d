"""bfloat16 NCHW k x k convolutions in the NHWC formulation image by image (kernels/conv_bf16.c,
op_conv2d_bf16_as_nhwc_images; the registry's CONV_BF16_OPTIONS "as_nhwc_image"): forced on and off at
every level whatever this host ships, against the float64 reference, and bit for bit against the
whole-batch route it replaces (NaN and Inf inputs included); with "as_nhwc_image_l2" also the weights
larger than an image whose per-thread working set fits the L2 budget."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry
from onepath.ops import conv as _conv

from bf16_options import assert_same_bits, bf16_options, shipped_bf16_options
from test_conv import run_case

IMAGE = registry.CONV_BF16_FLAGS["as_nhwc_image"]
L2 = registry.CONV_BF16_FLAGS["as_nhwc_image_l2"]
ROUTES = {"whole": 0, "image": IMAGE, "image_l2": IMAGE | L2}

# (n, c, h, w, oc, kh, kw, stride, padding)
CASES = [
    (3, 32, 14, 14, 16, 3, 3, 1, 1),    # 2 threads: one image each, the third on both (whole-batch route)
    (4, 64, 9, 14, 16, 3, 3, 2, 1),     # stride 2
    (2, 32, 7, 7, 64, 3, 3, 1, 1),      # weight larger than an image: image by image with "as_nhwc_image_l2"
    (2, 256, 4, 4, 256, 3, 3, 1, 1),    # weight (1.1 MiB) beyond the L2 budget: the whole-batch route
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:8])))
@pytest.mark.parametrize("route", list(ROUTES))
def test_as_nhwc_image_every_level(level, kxk_as_nhwc, pool_threads, case, route):
    n, c, h, w, oc, kh, kw, s, p = case
    base = shipped_bf16_options() & ~(IMAGE | L2)
    with bf16_options(base | ROUTES[route]):
        run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, bias=True, activation="relu", dtype=bfloat16)
    assert all(pl.desc.nhwc == 2 for pl in _conv._PLANS.values())


@pytest.mark.parametrize("oc", [16, 64])
def test_as_nhwc_image_same_bits(kxk_as_nhwc, pool_threads, oc):
    """Each output sums all of K in registers in the same order either way: bit for bit equal with
    and without "as_nhwc_image" (and "as_nhwc_image_l2": oc 64 is a weight larger than an image, which
    only it runs image by image), float32 and bfloat16 results, NaN and Inf inputs included."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 64, 14, 14)).astype(np.float32)
    x[0, 3, 4, 5], x[2, 0, 0, 7], x[4, 63, 13, 13] = np.nan, np.inf, -np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((oc, 64, 3, 3)).astype(bfloat16)
    b = rng.standard_normal(oc).astype(np.float32)
    base = shipped_bf16_options() & ~(IMAGE | L2)

    def compute():
        _conv._PLANS.clear()
        return [onepath.conv2d(x, wt, b, padding=1, activation="relu", dtype=dt) for dt in (np.float32, bfloat16)]
    assert_same_bits((base, base | IMAGE, base | IMAGE | L2), compute, nan_index=1)


def test_as_nhwc_image_rule_is_per_uarch():
    """zen4 bfloat16: the option, and res2_branch2b's 56 x 56 plane in the NHWC formulation at a batch
    ("kxk_batch"), not at batch 1; hosts without a row keep the NCHW GEMM and neither."""
    assert registry.conv_bf16_flags("avx512_core_bf16", uarch="zen4") & (IMAGE | L2) == IMAGE | L2
    assert not registry.conv_bf16_flags("avx512_core_amx", uarch="sapphirerapids") & (IMAGE | L2)
    row = registry.replace(_conv.select_conv("implicit_gemm", "bfloat16", level="generic"), level="avx512_core_bf16")
    assert registry.conv_nchw_as_nhwc(row, 8, 56 * 56, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 1, 56 * 56, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 8, 112 * 112, uarch="zen4")
    assert not registry.conv_nchw_as_nhwc(row, 8, 56 * 56, uarch="sapphirerapids")
