"""NHWC stride-1 k x k bfloat16 convolutions on the AMX tiles reading the padded input in place
(kernels/conv_bf16.c, op_conv2d_nhwc_amx_s1; op_conv_bf16_options bit "amx_s1", the registry's
CONV_BF16_OPTIONS): forced on and off in the amx_emu build (any host) and, where the host runs it,
the avx512_core_amx build; against the float64 reference, and bit for bit against the GEMM over the
packed gather it replaces (the same pack, depth order and sums), NaN and Inf inputs included."""
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

AMX_S1 = registry.CONV_BF16_FLAGS["amx_s1"]
AMX_S2 = registry.CONV_BF16_FLAGS["amx_s2"]

# (n, c, h, w, oc, kh, kw, (pt, pb), (pl, pr), dilation)
CASES = [
    (1, 64, 12, 12, 64, 3, 3, (1, 1), (1, 1), 1),     # ResNet-like, several 32-pixel blocks
    (3, 32, 9, 16, 40, 3, 3, (1, 1), (1, 1), 1),      # a batch; OC 40: a 32-column panel and an 8-column one
    (2, 64, 10, 20, 16, 5, 5, (2, 2), (2, 2), 1),     # 5 x 5
    (1, 32, 7, 30, 33, 1, 3, (0, 0), (1, 1), 1),      # 1 x 3, OC 33
    (2, 96, 11, 17, 24, 3, 3, (2, 2), (2, 2), 2),     # dilation 2, odd sizes
    (1, 32, 8, 40, 48, 3, 3, (0, 0), (0, 0), 1),      # unpadded
    (1, 64, 6, 64, 32, 2, 2, (0, 1), (1, 0), 1),      # 2 x 2 with asymmetric padding
    (1, 32, 5, 8, 16, 3, 3, (1, 1), (1, 1), 1),       # OW 8: the smallest width it takes (4 (KW-1) DW)
    (9, 32, 3, 12, 32, 3, 3, (1, 1), (1, 1), 1),      # many images of 2 blocks, the last one short
    (2, 32, 2, 8, 24, 3, 3, (1, 1), (1, 1), 1),       # 16 pixels per image: one block, half of it real
    (1, 64, 10, 12, 32, 3, 1, (1, 1), (0, 0), 1),     # KW 1: no dropped columns
    (1, 32, 9, 18, 16, 3, 3, (2, 2), (1, 1), (2, 1)), # DH 2, DW 1
    (1, 32, 6, 9, 16, 3, 3, (3, 0), (4, 2), 1),       # padding wider than the kernel's halo
    (1, 32, 6, 9, 16, 3, 3, (1, 1), (4, 4), 1),       # wider on both sides: rows of OW = W + 6
    (1, 32, 30, 30, 16, 3, 3, (1, 1), (1, 1), 1),     # 30 x 32 / 32 = 30 blocks: groups of 16, 14
    # the depth in chunks of OP_AMXC_KCHUNK_S1 (3 x 3: two channel blocks), partial sums between them
    (2, 128, 14, 14, 48, 3, 3, (1, 1), (1, 1), 1),    # C 128: two chunks of two blocks
    (1, 160, 24, 24, 32, 3, 3, (1, 1), (1, 1), 1),    # C 160: chunks 2, 2, 1; 20 blocks in 2 groups
    (1, 224, 9, 20, 32, 1, 3, (0, 0), (1, 1), 1),     # 1 x 3, C 224: chunks of 6 blocks, then 1
    (2, 160, 8, 12, 40, 2, 2, (0, 1), (1, 0), 1),     # 2 x 2, C 160: chunks of 4 blocks, then 1
]


def _builds():
    out = ["amx_emu"]
    if "avx512_core_amx" in probe().levels:
        out.append("avx512_core_amx")
    return out


def _conv(build, x, wt, b, pads, dil, y_bf16, flags, nthreads, stride=1, takes=None):
    """op_conv2d_bf16 of ``build`` on NHWC x (bfloat16) with op_conv_bf16_options(flags); y (N, OH, OW,
    OC), float32 (or bfloat16 bits widened, y_bf16), NaN wherever the call wrote nothing. With the
    bit set, the problem must be one the AMX kernel takes (op_conv2d_bf16_amx_s1); stride 2 along H
    and W takes the bit AMX_S2."""
    mod = load(build)
    ffi, lib = mod.ffi, mod.lib
    n, h, w, c = x.shape
    oc, _, kh, kw = wt.shape
    (pt, pb), (pl, pr) = pads
    dh, dw = dil if isinstance(dil, tuple) else (dil, dil)
    oh = (h + pt + pb - dh * (kh - 1) - 1) // stride + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // stride + 1
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = n, c, h, w, oc, oh, ow, kh, kw
    d.sh = d.sw = stride
    d.pt, d.pl = pt, pl
    d.dh, d.dw = dh, dw
    d.groups, d.nhwc = 1, 1
    xin = np.ascontiguousarray(x).view(np.uint16)
    wk = np.ascontiguousarray(wt).view(np.uint16)
    y = np.full((n, oh, ow, oc), 0xFFFF, np.uint16) if y_bf16 else np.full((n, oh, ow, oc), np.nan, np.float32)
    old = lib.op_conv_bf16_options(-1)
    lib.op_conv_bf16_options(flags)
    try:
        if takes is None:
            takes = bool(flags & (AMX_S1 if stride == 1 else AMX_S2))
        assert lib.op_conv2d_bf16_amx_s1(d) == takes
        used = lib.op_conv2d_bf16(d, ffi.cast("const uint16_t *", xin.ctypes.data),
                                  ffi.cast("const uint16_t *", wk.ctypes.data),
                                  ffi.cast("const float *", b.ctypes.data), ffi.cast("void *", y.ctypes.data),
                                  int(y_bf16), 1, ffi.NULL, nthreads)   # activation 1: ReLU
    finally:
        lib.op_conv_bf16_options(old)
    assert used >= 1
    return y.view(bfloat16).astype(np.float32) if y_bf16 else y


def _inputs(case, seed=3, nonfinite=False):
    n, c, h, w, oc, kh, kw, pv, ph, dil = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    if nonfinite:
        x[0, 0, 0, 0], x[-1, h // 2, w - 1, c - 1] = np.nan, np.inf
    wt = (rng.standard_normal((oc, c, kh, kw)) / np.sqrt(c * kh * kw)).astype(bfloat16)
    b = rng.standard_normal(oc).astype(np.float32)
    return x.astype(bfloat16), wt, b


# stride 2 along H and W, dilation 1 ("amx_s2": the copy's four phase planes)
CASES_S2 = [   # (at least OP_AMXC_S2_MIN_PIXELS = 128 output pixels per image)
    (1, 64, 24, 24, 64, 3, 3, (1, 1), (1, 1), 1),     # 12 x 12 output, one dropped column per row
    (2, 32, 33, 34, 40, 3, 3, (1, 1), (1, 1), 1),     # odd input height, OC 40
    (1, 32, 31, 36, 16, 5, 5, (2, 2), (2, 2), 1),     # 5 x 5: two dropped columns per row
    (1, 64, 56, 56, 32, 3, 3, (1, 1), (1, 1), 1),     # ResNet-50 res3a_branch2b's geometry (28 x 28 out)
    (1, 32, 22, 23, 24, 4, 4, (1, 2), (1, 2), 1),     # even kernel, asymmetric padding
    (3, 32, 25, 25, 32, 3, 3, (1, 1), (1, 1), 1),     # a batch of 13 x 13 outputs
    (1, 32, 24, 30, 16, 1, 3, (0, 0), (1, 1), 1),     # 1 x 3
    (1, 32, 24, 32, 16, 2, 2, (0, 0), (0, 0), 1),     # 2 x 2 unpadded: no dropped column
]

# (stride, case): every stride-1 case on "amx_s1", every stride-2 case on "amx_s2"
STRIDED = [(1, c) for c in CASES] + [(2, c) for c in CASES_S2]


def _sid(sc):
    return f"s{sc[0]}-" + "x".join(map(str, sc[1][:7]))


@pytest.mark.parametrize("build", _builds())
@pytest.mark.parametrize("sc", STRIDED, ids=_sid)
@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("y_bf16", [False, True], ids=["y_f32", "y_bf16"])
def test_amx_s1_reference(build, sc, nthreads, y_bf16):
    stride, case = sc
    x, wt, b = _inputs(case)
    pads, dil = (case[7], case[8]), case[9]
    dil2 = dil if isinstance(dil, tuple) else (dil, dil)
    got = _conv(build, x, wt, b, pads, dil, y_bf16, AMX_S1 if stride == 1 else AMX_S2, nthreads, stride=stride)
    ref = np.maximum(reference_conv2d(x.transpose(0, 3, 1, 2), wt, b, (stride, stride), pads, dil2, 1), 0)
    tol = _bound(x.transpose(0, 3, 1, 2).astype(np.float32), wt.astype(np.float32), b, (stride, stride), pads,
                 dil2, 1, out_bf16=y_bf16)
    assert not np.isnan(got).any()   # every output written
    assert np.all(np.abs(got - ref.transpose(0, 2, 3, 1)) <= tol.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("sc", STRIDED, ids=_sid)
@pytest.mark.parametrize("y_bf16", [False, True], ids=["y_f32", "y_bf16"])
@pytest.mark.parametrize("build", _builds())
def test_amx_s1_same_bits_as_gemm(build, sc, y_bf16):
    """Both routes pack the weight alike and sum each output over the same 32-deep blocks in the
    same order, their tiles starting from the partial sums between blocks (the GEMM's edge blocks
    too): bit for bit the same on the emulated and the real tiles, NaN and Inf inputs included
    (their NaN reaches the output). Stride 2 ("amx_s2") alike."""
    stride, case = sc
    x, wt, b = _inputs(case, nonfinite=True)
    pads, dil = (case[7], case[8]), case[9]
    on = _conv(build, x, wt, b, pads, dil, y_bf16, AMX_S1 if stride == 1 else AMX_S2, 2, stride=stride)
    off = _conv(build, x, wt, b, pads, dil, y_bf16, 0, 2, stride=stride)
    np.testing.assert_array_equal(on, off)
    if case[1] > 128:   # several depth chunks: three threads (a task group per thread) alike
        flags = AMX_S1 if stride == 1 else AMX_S2
        on3 = _conv(build, x, wt, b, pads, dil, y_bf16, flags, 3, stride=stride)
        np.testing.assert_array_equal(on3, off)
    assert np.isnan(on).any()


def test_amx_s2_needs_its_bit():
    """Stride 2 is not taken with "amx_s1" alone, nor stride 1 with "amx_s2" alone."""
    x, wt, b = _inputs(CASES_S2[0])
    pads = (CASES_S2[0][7], CASES_S2[0][8])
    _conv("amx_emu", x, wt, b, pads, 1, False, AMX_S1, 1, stride=2)   # asserts the kernel declines
    x, wt, b = _inputs(CASES[0])
    _conv("amx_emu", x, wt, b, (CASES[0][7], CASES[0][8]), 1, False, AMX_S2, 1)


def test_amx_s2_declines_small_outputs():
    """A stride-2 problem of fewer than 128 output pixels per image (7 x 7: ResNet-50's
    res5a_branch2b) stays on the GEMM route, correct there."""
    case = (2, 64, 14, 14, 32, 3, 3, (1, 1), (1, 1), 1)
    x, wt, b = _inputs(case)
    got = _conv("amx_emu", x, wt, b, ((1, 1), (1, 1)), 1, False, AMX_S2, 1, stride=2, takes=False)
    ref = np.maximum(reference_conv2d(x.transpose(0, 3, 1, 2), wt, b, (2, 2), ((1, 1), (1, 1)), (1, 1), 1), 0)
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1), rtol=2e-2, atol=2e-2)


def test_amx_s1_route_in_plan_text():
    """Where this host's AMX level runs the kernel (its row), the plan's descriptor text (the
    ONEPATH_VERBOSE line) of an NHWC 3x3 convolution ends with ",amx_s1"; its NCHW twin does not
    (that route decides inside the kernel)."""
    level = select_conv("implicit_gemm", "bfloat16").level
    if level != "avx512_core_amx" or not registry.conv_bf16_flags(level) & AMX_S1:
        pytest.skip(f"the bfloat16 convolutions run at {level} without the amx_s1 option here")
    _convmod._PLANS.clear()
    w = np.ones((32, 32, 3, 3), bfloat16)
    onepath.conv2d(np.ones((1, 9, 9, 32), bfloat16), w, None, 1, 1, layout="NHWC")
    onepath.conv2d(np.ones((1, 32, 9, 9), bfloat16), w, None, 1, 1)
    texts = sorted(pl.text for pl in _convmod._PLANS.values())
    assert [t.endswith(",amx_s1") for t in texts] == [t.endswith(",nhwc,amx_s1") for t in texts]
    assert sum(t.endswith(",amx_s1") for t in texts) == 1, texts


def test_amx_s1_rule_is_per_uarch():
    """The Intel AMX class runs it at its AMX level; zen4 has no AMX build and no such bit."""
    assert registry.conv_bf16_flags("avx512_core_amx", uarch="sapphirerapids") & AMX_S1
    assert not registry.conv_bf16_flags("avx512_core_bf16", uarch="zen4") & AMX_S1
