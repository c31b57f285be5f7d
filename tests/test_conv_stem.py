"""The direct few-channel convolution (kernels/conv_stem.c, registry.CONV_STEM_OPTIONS), forced on at
every level that has it whatever the host's own row says, against the float64 reference: strides,
paddings, odd sizes, output-channel tails, bias / activations, batch > 1, NCHW and NHWC, float32
and bfloat16, and non-finite inputs (a padding depth never multiplies an Inf)."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry
from onepath.dispatch.levels import level_index
from onepath.kernels import load
from onepath.ops import conv as _conv
from onepath.ops.conv import reference_conv2d, select_conv

from test_conv import run_case

_ALL = sum(registry.CONV_STEM_FLAGS.values())


@pytest.fixture
def stem(level):
    """The direct kernel switched on in the modules that run this level's float32 and bfloat16
    convolutions (generic has none: skipped; avx2 its float32 kernel, 6 pixels x 16 channels)."""
    if level_index(level) < level_index("avx2"):
        pytest.skip(f"no direct few-channel kernel at {level}")
    libs = {load(select_conv("implicit_gemm", dt).level).lib for dt in ("float32", "bfloat16")}
    old = [(lib, lib.op_conv_stem_options(_ALL)) for lib in libs]
    _conv._PLANS.clear()
    yield level
    for lib, flags in old:
        lib.op_conv_stem_options(flags)


# (n, c, h, w, oc, kh, kw, stride, padding)
CASES = [
    (1, 3, 33, 31, 64, 7, 7, 2, 3),                     # the stem, odd sizes (OW 16: a moved-back tile)
    (2, 3, 17, 15, 37, 5, 5, 1, 2),                     # batch 2, stride 1, OC tail (37 = 32 + 5)
    (1, 2, 20, 29, 20, 3, 3, 3, 0),                     # stride 3, no padding, OC 20 (second half partial)
    (1, 4, 9, 40, 48, 3, 5, (1, 2), (1, 2)),            # C 4, mixed stride / padding, odd KW 5
    (1, 1, 12, 12, 16, 3, 4, 2, ((0, 2), (1, 0))),      # C 1, even KW, asymmetric padding
    (1, 3, 7, 8, 8, 7, 7, 2, 3),                        # OW 4 < 14: a short tile; OC 8
    (1, 3, 6, 70, 32, 3, 3, 1, 1),                      # OW 70: five tiles of 14
]
ACTS = [None, "relu", "gelu", "silu", "gelu_tanh", None, "relu"]


@pytest.mark.parametrize("dtype", [np.float32, bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("i", range(len(CASES)), ids=lambda i: "x".join(map(str, CASES[i][:7])))
def test_stem_matches_reference(stem, i, layout, dtype):
    n, c, h, w, oc, kh, kw, s, p = CASES[i]
    run_case(n, c, h, w, oc, kh, kw, s, p, 1, 1, layout=layout, bias=i % 3 != 1,
             activation=ACTS[i], dtype=dtype, seed=i)


@pytest.mark.parametrize("threads", [1, 2])
def test_stem_bands_and_threads(stem, threads):
    """Tasks are bands of output rows, each copying its own padded rows: full bands of 16 with a
    partial last one (OH 35, batch 3), and bands halved for balance (OH 17, batch 1), at 1 and 2
    threads."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        for dtype in (np.float32, bfloat16):
            for layout in ("NCHW", "NHWC"):
                run_case(3, 3, 70, 12, 40, 7, 7, 2, 3, 1, 1, layout=layout, dtype=dtype, seed=3)
                run_case(1, 3, 33, 30, 64, 7, 7, 2, 3, 1, 1, layout=layout, dtype=dtype, activation="relu", seed=4)
    finally:
        onepath.set_num_threads(old)


def test_stem_fallbacks_and_x_bf16(stem):
    """Problems outside the kernel's reach (dilation, groups, C > 4, 1x1) take the usual path; a
    bfloat16 input with a float32 weight (widened into the float32 copy) is routed too."""
    run_case(1, 3, 12, 12, 16, 3, 3, 1, 1, 2, 1)        # dilation 2
    run_case(1, 4, 12, 12, 16, 3, 3, 1, 1, 1, 2)        # groups 2
    run_case(1, 5, 12, 12, 16, 3, 3, 2, 1, 1, 1)        # C 5
    run_case(1, 3, 12, 12, 16, 1, 1, 1, 0, 1, 1)        # 1x1
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 19, 21)).astype(bfloat16)
    wt = rng.standard_normal((24, 3, 7, 7)).astype(np.float32)
    got = onepath.conv2d(x, wt, None, 2, 3)
    assert got.dtype == np.float32
    ref = reference_conv2d(x, wt, None, (2, 2), ((3, 3), (3, 3)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("geo", [(7, 2, 3), (3, 1, 1), (5, 2, 0)], ids=lambda g: "k%ds%dp%d" % g)
def test_stem_nonfinite(stem, geo, layout, dtype):
    """Inf / NaN inputs at the borders and inside: exactly the reference's NaN / +-Inf outputs (an
    odd KW's last tap, the pair reaching past a row's end and the padding are real zeros in the
    copy, so no Inf meets a padding zero), the finite outputs within the float32 bound."""
    k, s, p = geo
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 15, 17)).astype(np.float32)
    x[0, 0, 3, -1] = np.inf          # last column
    x[0, 1, 0, 0] = -np.inf          # first row and column
    x[0, 2, 7, 6] = np.inf
    x[1, 0, -1, 8] = np.nan          # last row
    x[1, 1, 5, -2] = -np.inf
    wt = rng.standard_normal((40, 3, k, k)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    if dtype == bfloat16:
        x, wt = x.astype(bfloat16), wt.astype(bfloat16)
    xin = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = np.asarray(onepath.conv2d(xin, wt, b, s, p, layout=layout), np.float64)
    if layout == "NHWC":
        got = got.transpose(0, 3, 1, 2)
    with np.errstate(invalid="ignore"):
        ref = reference_conv2d(x, wt, b, (s, s), ((p, p), (p, p)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    assert np.isnan(ref).any() and np.isinf(ref).any()
    fin = np.isfinite(ref)
    tol = 2e-2 if dtype == bfloat16 else 1e-4
    np.testing.assert_allclose(got[fin], ref[fin], rtol=tol, atol=tol)


@pytest.mark.parametrize("oc, act, xdt",
                         [(64, None, np.float32), (40, "relu", np.float32), (64, "gelu", bfloat16)],
                         ids=["oc64", "oc40-relu", "xbf16-gelu"])
def test_stem_streamed_stores_same_bits(stem, oc, act, xdt):
    """An NHWC float32 output over 2 MiB (OP_STEM_NT_MIN) takes the non-temporal stores of whole
    64-byte lines (the output allocated on a line; OC 40: pixels 160 bytes apart, so lines and
    partial vectors alternate, the partial ones stored as before): the same bits as the cached
    stores, at 1 and 2 threads, and the reference's values."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 40, 330, 3)).astype(xdt)
    wt = rng.standard_normal((oc, 3, 7, 7)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    libs = {load(select_conv("implicit_gemm", dt).level).lib for dt in ("float32", "bfloat16")}
    nt = registry.CONV_STEM_FLAGS["stem_nt"]
    old = onepath.get_num_threads()
    found = [(lib, lib.op_conv_stem_options(-1)) for lib in libs]
    try:
        for threads in (1, 2):
            onepath.set_num_threads(threads)
            got = {}
            for flags in (_ALL, _ALL & ~nt):
                for lib in libs:
                    lib.op_conv_stem_options(flags)
                y = onepath.conv2d(x, wt, b, 1, 3, layout="NHWC", activation=act)
                assert y.dtype == np.float32 and y.nbytes > 2 << 20
                assert y.ctypes.data % 64 == 0
                got[flags] = y
            np.testing.assert_array_equal(got[_ALL], got[_ALL & ~nt])
    finally:
        onepath.set_num_threads(old)
        for lib, flags in found:
            lib.op_conv_stem_options(flags)
    ref = reference_conv2d(x[:, :12].transpose(0, 3, 1, 2), wt, b, (1, 1), ((3, 0), (3, 3)))
    ref = {None: ref, "relu": np.maximum(ref, 0)}.get(act)
    if ref is not None:
        got9 = got[_ALL][:, :9].transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got9, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, bfloat16], ids=["f32", "bf16"])
def test_stem_route_in_plan_text(stem, dtype):
    """The plan's descriptor text (ONEPATH_VERBOSE's line) ends with ",stem" where the direct kernel
    takes the problem, in both layouts, never with ",as_nhwc" (the kernel reads NCHW itself, where
    CONV_NCHW_AS_NHWC's limits would route the problem); not for C 5 (outside its reach) nor with
    the option off."""
    def texts():
        _conv._PLANS.clear()
        for layout in ("NCHW", "NHWC"):
            for c in (3, 5):
                x = np.ones((1, c, 20, 20) if layout == "NCHW" else (1, 20, 20, c), dtype)
                onepath.conv2d(x, np.ones((8, c, 7, 7), dtype), None, 2, 3, layout=layout)
        return [pl.text for pl in _conv._PLANS.values()]
    got = texts()
    assert len(got) == 4
    assert all(t.endswith(",stem") == ("ic3" in t) for t in got), got
    assert not any(",as_nhwc" in t for t in got if t.endswith(",stem")), got   # NCHW in place
    libs = {load(select_conv("implicit_gemm", dt).level).lib for dt in ("float32", "bfloat16")}
    for lib in libs:
        lib.op_conv_stem_options(0)
    assert not any(t.endswith(",stem") for t in texts())


def test_empty_out_alignment():
    """_empty_out: numpy's array below 1 MiB; from there a view starting on 64 bytes."""
    small = _conv._empty_out((10, 10), np.float32)
    assert small.shape == (10, 10) and small.dtype == np.float32 and small.base is None
    for shape, dt in (((1 << 18) + 3,), np.float32), (((3, 700, 257), np.uint16)):
        a = _conv._empty_out(shape, dt)
        assert a.shape == shape and a.dtype == dt and a.ctypes.data % 64 == 0
        assert a.flags.c_contiguous and a.flags.writeable


def test_stem_options_rows():
    """Zen 4 ships the route, the Intel AMX class its float32 half (its AMX level keeps the tiles)
    with streamed stores (not measured on Zen 4), Zen 3 its AVX2 float32 tile; elsewhere the
    implicit GEMM as before; the flags the loader sets are the row's."""
    assert registry.conv_stem_flags("avx512_core_bf16", uarch="zen4") == (
        registry.CONV_STEM_FLAGS["stem_f32"] | registry.CONV_STEM_FLAGS["stem_bf16"])
    assert registry.conv_stem_flags("avx512_core", uarch="zen4") == registry.CONV_STEM_FLAGS["stem_f32"]
    assert registry.conv_stem_flags("avx512_core", uarch="sapphirerapids") == (
        registry.CONV_STEM_FLAGS["stem_f32"] | registry.CONV_STEM_FLAGS["stem_nt"])
    for lv in ("avx512_core_bf16", "avx512_core_amx"):
        assert registry.conv_stem_flags(lv, uarch="sapphirerapids") == 0
    assert registry.conv_stem_flags("avx512_core", uarch="icelake_server") == 0
    assert registry.conv_stem_flags("avx2", uarch="zen3") == registry.CONV_STEM_FLAGS["stem_f32"]
    assert registry.conv_stem_flags("avx2", uarch="haswell") == 0
    lib = load("generic").lib
    assert lib.op_conv_stem_options(-1) == 0
