"""bfloat16 NCHW 1x1 stride-1 convolutions at a batch as one GEMM over the pixels of all images
(kernels/conv_bf16.c, op_conv2d_bf16_nchw1x1_joint; the registry's CONV_BF16_OPTIONS "nchw1x1_joint"):
forced on and off at every level whatever this host ships, against the float64 reference, and bit for
bit against the per-image GEMM it replaces (NaN and Inf inputs included)."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry
from onepath.ops import conv as _conv

from bf16_options import assert_same_bits, bf16_options, shipped_bf16_options
from test_conv import run_case

JOINT = registry.CONV_BF16_FLAGS["nchw1x1_joint"]

# (n, c, h, w, oc): C >= 1024, planes of 36-196 pixels whose 32-column panels span two images
CASES = [
    (3, 1024, 6, 6, 48),   # 36 pixels: panel 2 = 4 pixels of one image + 28 of the next
    (2, 1025, 5, 8, 20),   # odd C (a zero K row in the last block), 40 pixels
    (2, 1024, 7, 7, 16),   # 49 pixels
    (2, 1024, 14, 14, 24),  # 196 pixels (the ResNet-50 14 x 14 planes: the route's target, shipped rule)
]


@pytest.fixture
def nchw(monkeypatch):
    """No NCHW-as-NHWC rule: the NCHW GEMM (the route this option replaces) at every level."""
    monkeypatch.setattr(registry, "CONV_NCHW_AS_NHWC", {})
    _conv._PLANS.clear()
    yield
    _conv._PLANS.clear()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("joint", [False, True], ids=["per_image", "joint"])
def test_nchw1x1_joint_every_level(level, nchw, pool_threads, case, joint):
    n, c, h, w, oc = case
    base = shipped_bf16_options() & ~JOINT
    with bf16_options(base | (JOINT if joint else 0)):
        run_case(n, c, h, w, oc, 1, 1, 1, 0, 1, 1, bias=True, activation="relu", dtype=bfloat16)


@pytest.mark.parametrize("c", [1024, 2080])
def test_nchw1x1_joint_same_bits(nchw, pool_threads, c):
    """Same K blocks (C 2080: over two KC blocks at the shipped kc 2048, float partial sums of tiles
    spanning images), each output summed in the same order, rounded once: bit for bit equal with and
    without "nchw1x1_joint", float32 and bfloat16 results, NaN and Inf inputs included."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, c, 7, 7)).astype(np.float32)
    x[0, 3, 4, 5], x[1, 0, 6, 6], x[2, c - 1, 0, 0] = np.nan, np.inf, -np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((40, c, 1, 1)).astype(bfloat16)
    b = rng.standard_normal(40).astype(np.float32)
    base = shipped_bf16_options() & ~JOINT

    def compute():
        _conv._PLANS.clear()
        return [onepath.conv2d(x, wt, b, activation="relu", dtype=dt) for dt in (np.float32, bfloat16)]
    assert_same_bits((base, base | JOINT), compute, nan_index=1)


def test_nchw1x1_joint_rule_is_per_uarch():
    assert registry.conv_bf16_flags("avx512_core_bf16", uarch="zen4") & JOINT
    assert not registry.conv_bf16_flags("avx512_core_amx", uarch="sapphirerapids") & JOINT
