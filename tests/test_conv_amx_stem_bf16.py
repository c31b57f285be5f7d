"""NHWC bfloat16 convolutions with few input channels on the AMX tiles, one A tile per kernel row read
in place from a padded copy of the input (kernels/conv_bf16.c, op_conv2d_nhwc_amx_stem;
op_conv_bf16_options bit "amx_stem", the registry's CONV_BF16_OPTIONS): forced on and off in the
amx_emu build (any host) and, where the host runs it, the avx512_core_amx build; against the float64
reference, the same bits at 1, 2 and 3 threads (other bands), and inputs with an Inf or NaN (NaN only
where an output reads it; the other outputs' bits unchanged)."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry
from onepath.dispatch.cpu import probe
from onepath.kernels import load
from onepath.ops import conv as _convmod
from onepath.ops.conv import reference_conv2d, select_conv

from test_conv import _bound

AMX_STEM = registry.CONV_BF16_FLAGS["amx_stem"]

# (n, c, h, w, oc, kh, kw, (sh, sw), (pt, pb), (pl, pr))
CASES = [
    (2, 3, 30, 30, 64, 7, 7, (2, 2), (3, 3), (3, 3)),   # the ResNet-50 stem, small: OW 15, one short segment
    (1, 3, 70, 70, 64, 7, 7, (2, 2), (3, 3), (3, 3)),   # OW 35: a pair of segments and a short one alone
    (1, 4, 20, 40, 40, 5, 5, (1, 1), (2, 2), (2, 2)),   # C KW 20, OC 40: a 32-column panel and an 8-column one
    (1, 2, 18, 50, 16, 3, 8, (2, 1), (1, 1), (0, 0)),   # strides (2, 1), C KW 16
    (1, 1, 12, 64, 33, 3, 9, (1, 3), (0, 0), (4, 4)),   # C 1, KW 9, stride 3 along W, OC 33
    (5, 3, 40, 20, 24, 7, 7, (1, 1), (3, 3), (3, 3)),   # several images, bands of rows
    (1, 4, 10, 30, 16, 3, 8, (1, 1), (1, 1), (0, 0)),   # C KW 32: every depth of the tile real
    (1, 3, 9, 9, 16, 3, 3, (1, 1), (4, 4), (4, 4)),     # padding wider than the kernel's halo, C KW 9
    (1, 3, 12, 146, 32, 7, 7, (1, 2), (3, 3), (3, 3)),  # OW 73: five segments (two pairs, one alone)
]


def _builds():
    out = ["amx_emu"]
    if "avx512_core_amx" in probe().levels:
        out.append("avx512_core_amx")
    return out


def _conv(build, x, wt, b, stride, pads, y_bf16, flags, nthreads, act=1):
    """op_conv2d_bf16 of ``build`` on NHWC x (bfloat16) with op_conv_bf16_options(flags), activation
    ``act`` (1 ReLU, 2 exact GELU), bias b (None: none); y (N, OH, OW, OC) float32 (bfloat16 bits
    widened with y_bf16), NaN wherever nothing was written. Also returns op_conv2d_bf16_amx_stem(d)
    under those flags."""
    mod = load(build)
    ffi, lib = mod.ffi, mod.lib
    n, h, w, c = x.shape
    oc, _, kh, kw = wt.shape
    (sh, sw), ((pt, pb), (pl, pr)) = stride, pads
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w + pl + pr - kw) // sw + 1
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = n, c, h, w, oc, oh, ow, kh, kw
    d.sh, d.sw = sh, sw
    d.pt, d.pl = pt, pl
    d.dh = d.dw = 1
    d.groups, d.nhwc = 1, 1
    xin = np.ascontiguousarray(x).view(np.uint16)
    wk = np.ascontiguousarray(wt).view(np.uint16)
    y = np.full((n, oh, ow, oc), 0xFFFF, np.uint16) if y_bf16 else np.full((n, oh, ow, oc), np.nan, np.float32)
    old = lib.op_conv_bf16_options(-1)
    lib.op_conv_bf16_options(flags)
    try:
        takes = lib.op_conv2d_bf16_amx_stem(d)
        used = lib.op_conv2d_bf16(d, ffi.cast("const uint16_t *", xin.ctypes.data),
                                  ffi.cast("const uint16_t *", wk.ctypes.data),
                                  ffi.NULL if b is None else ffi.cast("const float *", b.ctypes.data),
                                  ffi.cast("void *", y.ctypes.data), int(y_bf16), act, ffi.NULL, nthreads)
    finally:
        lib.op_conv_bf16_options(old)
    assert used >= 1
    return (y.view(bfloat16).astype(np.float32) if y_bf16 else y), takes


def _inputs(case, seed=5):
    n, c, h, w, oc, kh, kw = case[:7]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(bfloat16)
    wt = (rng.standard_normal((oc, c, kh, kw)) / np.sqrt(c * kh * kw)).astype(bfloat16)
    b = rng.standard_normal(oc).astype(np.float32)
    return x, wt, b


@pytest.mark.parametrize("build", _builds())
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])) + f"s{c[7][0]}{c[7][1]}")
@pytest.mark.parametrize("y_bf16", [False, True], ids=["y_f32", "y_bf16"])
def test_amx_stem_reference_and_threads(build, case, y_bf16):
    x, wt, b = _inputs(case)
    stride, pads = case[7], (case[8], case[9])
    got, takes = _conv(build, x, wt, b, stride, pads, y_bf16, AMX_STEM, 1)
    assert takes == 1
    xn = x.transpose(0, 3, 1, 2)
    ref = np.maximum(reference_conv2d(xn, wt, b, stride, pads, (1, 1), 1), 0).transpose(0, 2, 3, 1)
    tol = _bound(xn.astype(np.float32), wt.astype(np.float32), b, stride, pads, (1, 1), 1,
                 out_bf16=y_bf16).transpose(0, 2, 3, 1)
    assert not np.isnan(got).any()   # every output written
    assert np.all(np.abs(got - ref) <= tol)
    for t in (2, 3):   # other bands and thread splits: the same sums
        np.testing.assert_array_equal(_conv(build, x, wt, b, stride, pads, y_bf16, AMX_STEM, t)[0], got)


@pytest.mark.parametrize("build", _builds())
def test_amx_stem_no_bias_gelu(build):
    """No bias and the exact GELU (the epilogue's slow activation), both output types."""
    import math
    case = CASES[1]
    x, wt, _ = _inputs(case, seed=9)
    stride, pads = case[7], (case[8], case[9])
    xn = x.transpose(0, 3, 1, 2)
    z = reference_conv2d(xn, wt, None, stride, pads, (1, 1), 1).transpose(0, 2, 3, 1)
    ref = 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    for y_bf16 in (False, True):
        got, takes = _conv(build, x, wt, None, stride, pads, y_bf16, AMX_STEM, 2, act=2)
        assert takes == 1 and not np.isnan(got).any()
        np.testing.assert_allclose(got, ref, rtol=2e-2 if y_bf16 else 1e-4, atol=2e-2 if y_bf16 else 1e-4)


@pytest.mark.parametrize("build", _builds())
@pytest.mark.parametrize("case", CASES[:2] + CASES[5:6], ids=lambda c: "x".join(map(str, c[:7])))
def test_amx_stem_nonfinite_input(build, case):
    """Depths past C KW read the next pixels' values times zero weights: a band holding an Inf or NaN
    reads zero-filled copies of its windows instead. NaN and Inf exactly where the float64 reference
    has them; every output that reads no such value has the bits of the same call on the input with
    those values made finite (so the other images, and the rest of this one, do not depend on them:
    onepath.dask's batch chunks); an image alone has its bits inside the batch."""
    x, wt, b = _inputs(case)
    xf = x.astype(np.float32)
    xbad = xf.copy()
    xbad[-1, xbad.shape[1] // 2, -1, 0] = np.inf
    xbad[-1, -1, 0, -1] = np.nan
    xbad = xbad.astype(bfloat16)
    stride, pads = case[7], (case[8], case[9])
    bad, takes = _conv(build, xbad, wt, b, stride, pads, False, AMX_STEM, 2)
    assert takes == 1
    good, _ = _conv(build, x, wt, b, stride, pads, False, AMX_STEM, 2)
    ref = np.maximum(reference_conv2d(xbad.transpose(0, 3, 1, 2), wt, b, stride, pads, (1, 1), 1), 0)
    ref = ref.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(np.isnan(bad), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(bad), np.isposinf(ref))
    assert np.isnan(bad).any()
    # the outputs whose windows read no Inf or NaN (ReLU makes some that do finite: -Inf -> 0)
    ind = (~np.isfinite(xbad.astype(np.float32))).astype(np.float64).transpose(0, 3, 1, 2)
    reads = reference_conv2d(ind, np.ones(wt.shape), None, stride, pads, (1, 1), 1) > 0
    clean = ~reads.transpose(0, 2, 3, 1)
    assert 0 < clean.sum() < clean.size
    np.testing.assert_array_equal(bad[clean], good[clean])
    if xbad.shape[0] > 1:
        alone, _ = _conv(build, xbad[:1], wt, b, stride, pads, False, AMX_STEM, 2)
        np.testing.assert_array_equal(alone, bad[:1])


def test_amx_stem_fits():
    """Few channels only (C KW from 8 to 32, C < 32), KH and KW >= 3, groups 1, dilation 1, NHWC."""
    mod = load("amx_emu")
    ffi, lib = mod.ffi, mod.lib

    def takes(**kw):
        d = ffi.new("op_conv_desc *")
        d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = 1, 3, 20, 20, 16, 14, 14, 7, 7
        d.sh = d.sw = d.dh = d.dw = d.groups = d.nhwc = 1
        for k, v in kw.items():
            setattr(d, k, v)
        old = lib.op_conv_bf16_options(-1)
        lib.op_conv_bf16_options(AMX_STEM)
        try:
            return lib.op_conv2d_bf16_amx_stem(d)
        finally:
            lib.op_conv_bf16_options(old)

    assert takes() == 1
    assert takes(nhwc=0) == 0 and takes(groups=3, oc=18) == 0 and takes(dw=2) == 0
    assert takes(c=5) == 0 and takes(c=1, kw=7, ow=14) == 0   # C KW 35, 7
    assert takes(c=1, kw=8, ow=13) == 1
    assert takes(c=8, kw=1, ow=20) == 0 and takes(kh=1, oh=20) == 0   # k x k only (KH, KW >= 3)


def test_amx_stem_route_in_plan_text():
    """Where this host's AMX level runs the kernel (its row), the plan's descriptor text (the
    ONEPATH_VERBOSE line) ends with ",amx_stem"."""
    level = select_conv("implicit_gemm", "bfloat16").level
    if level != "avx512_core_amx" or not registry.conv_bf16_flags(level) & AMX_STEM:
        pytest.skip(f"the bfloat16 convolutions run at {level} without the amx_stem option here")
    _convmod._PLANS.clear()
    x = np.ones((1, 20, 20, 3), bfloat16)
    onepath.conv2d(x, np.ones((16, 3, 7, 7), bfloat16), None, 2, 3, layout="NHWC")
    assert [pl.text.endswith(",amx_stem") for pl in _convmod._PLANS.values()] == [True]


def test_amx_stem_rule_is_per_uarch():
    """The Intel AMX class runs it at its AMX level; zen4 has no AMX build and no such bit."""
    assert registry.conv_bf16_flags("avx512_core_amx", uarch="sapphirerapids") & AMX_STEM
    assert not registry.conv_bf16_flags("avx512_core_bf16", uarch="zen4") & AMX_STEM
