"""float32 NCHW k x k convolutions in the NHWC formulation image by image (kernels/conv_f32.c,
op_conv2d_f32_images; the registry's CONV_F32_OPTIONS "as_nhwc_image"): forced on and off at every
level whatever this host ships, against the float64 reference, and bit for bit against the
whole-batch route it replaces (NaN and Inf inputs included)."""
from __future__ import annotations

import numpy as np
import pytest

import onepath
from onepath.dispatch import registry
from onepath.kernels import load
from onepath.ops import conv as _conv

from test_conv import run_case

IMAGE = registry.CONV_F32_FLAGS["as_nhwc_image"]

# (n, c, h, w, oc, kh, kw, stride, padding); the route takes planes of at least 784 output pixels
CASES = [
    (3, 32, 28, 28, 16, 3, 3, 1, 1),    # 2 threads: an image each, the third on both (whole batch)
    (4, 16, 56, 56, 40, 3, 3, 2, 1),    # stride 2, an output-channel tail
    (2, 16, 42, 21, 32, 3, 3, 1, 1),    # OW 21: 7-pixel rows (the kernel's "brg_ow7")
    (2, 8, 90, 9, 24, 3, 3, 1, 1),      # OW 9: the NHWC kernel does not take it: whole batch
    (2, 96, 78, 78, 8, 3, 3, 1, 1),     # an image's working set 2.6 MiB, over budget: whole batch
    (2, 32, 14, 14, 48, 3, 3, 1, 1),    # 196 output pixels: under the minimum, whole batch
]


def _libs():
    return [load(lv).lib for lv in onepath.available_isas()]


def _with_bit(on: bool, fn):
    """fn() with the bit on / off in every loaded module, the shipped options restored after."""
    libs = _libs()
    olds = [lib.op_conv_f32_options(-1) for lib in libs]
    try:
        for lib, old in zip(libs, olds):
            lib.op_conv_f32_options((old | IMAGE) if on else (old & ~IMAGE))
        _conv._PLANS.clear()
        return fn()
    finally:
        for lib, old in zip(libs, olds):
            lib.op_conv_f32_options(old)
        _conv._PLANS.clear()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:8])))
@pytest.mark.parametrize("on", [False, True], ids=["whole", "image"])
def test_as_nhwc_image_every_level(level, kxk_as_nhwc, pool_threads, case, on):
    n, c, h, w, oc, kh, kw, s, p = case
    _with_bit(on, lambda: run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, bias=True,
                                   activation="relu"))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_as_nhwc_image_same_bits(level, kxk_as_nhwc, pool_threads, n):
    """Each output sums all of K in the same order either way: bit for bit equal with and without
    "as_nhwc_image" (and at 1 and 2 threads: whole images per thread, the leftover on all), NaN and
    Inf inputs included."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 32, 28, 28)).astype(np.float32)
    x[0, 3, 4, 5], x[1, 0, 0, 7], x[n - 1, 31, 27, 27] = np.nan, np.inf, -np.inf
    wt = rng.standard_normal((48, 32, 3, 3)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)

    def compute():
        return np.asarray(onepath.conv2d(x, wt, b, padding=1, activation="relu"))
    whole, image = _with_bit(False, compute), _with_bit(True, compute)
    np.testing.assert_array_equal(whole.view(np.uint32), image.view(np.uint32))
    assert np.isnan(image).any()


def test_as_nhwc_image_rule_is_per_uarch():
    """The Intel AMX class's float32 level has the option (measured there); zen4 (1 MiB L2) does
    not."""
    assert registry.conv_f32_flags("avx512_core", uarch="sapphirerapids") & IMAGE
    assert not registry.conv_f32_flags("avx512_core", uarch="zen4") & IMAGE
