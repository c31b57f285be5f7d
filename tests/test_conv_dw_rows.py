"""Depthwise 3x3 NCHW row-register kernels (kernels/conv_dw.c op_dw3_s1r / op_dw3_s2r / op_dw3_s2w), asked for with
op_conv_desc.dw_rows = 1 (registry.DW_ROW_KERNELS picks them per microarchitecture; here they are
forced through the C entry at every level, so every AVX-512 host runs them; the levels without them
ignore the flag)."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry
from onepath.kernels import load
from onepath.ops.conv import reference_conv2d

EPS32 = np.finfo(np.float32).eps

# (c, h, w, stride, (top, left) padding, multiplier): stride 1 (padding 1 along W, OW = W) with any
# top padding, row-block remainders, partial / whole / several vectors per row; stride 2 with
# padding 0 / 1 / 2, odd widths, output rows past one vector
CASES = [
    (3, 7, 17, 1, (1, 1), 1),
    (3, 6, 14, 1, (1, 1), 1),   # bfloat16 rows of 9..16 columns: the plane widened first
    (3, 7, 7, 1, (1, 1), 1),    # rows of <= 8 columns: one 256-bit vector per row
    (2, 9, 8, 1, (2, 1), 2),
    (2, 3, 5, 1, (0, 1), 1),
    (3, 14, 14, 2, (1, 1), 1),  # stride 2, input rows of <= 16 columns: 256-bit output rows
    (2, 9, 15, 2, (0, 1), 2),
    (2, 16, 16, 2, (2, 1), 1),
    (2, 5, 9, 1, (0, 1), 2),
    (2, 13, 56, 1, (1, 1), 2),
    (2, 6, 65, 1, (0, 1), 1),
    (2, 9, 33, 1, (2, 1), 1),
    (3, 11, 29, 2, (1, 1), 1),
    (2, 14, 70, 2, (0, 0), 1),
    (2, 9, 40, 2, (2, 2), 2),
    (2, 5, 48, 2, (1, 1), 1),   # float32 stride 2: a last block of 8 outputs that reads column W - 1
]


def _run(lib, ffi, case, x_bf16, y_bf16, act, dw_rows, threads, offset=None):
    c, h, w, s, (pt, pl), m = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    if offset is not None:  # x starting `offset` floats past a 64-byte boundary
        buf = np.empty(x.size + 32, np.float32)
        at = (-buf.ctypes.data // 4) % 16 + offset
        buf[at:at + x.size] = x.ravel()
        x = buf[at:at + x.size].reshape(x.shape)
    wt = rng.standard_normal((c * m, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c * m).astype(np.float32)
    if x_bf16:
        x = x.astype(bfloat16).astype(np.float32)
    oh = (h + 2 * pt - 3) // s + 1
    ow = (w + 2 * pl - 3) // s + 1
    d = ffi.new("op_conv_desc *")
    d.n, d.c, d.h, d.w, d.oc, d.oh, d.ow, d.kh, d.kw = 1, c, h, w, c * m, oh, ow, 3, 3
    d.sh = d.sw = s
    d.pt, d.pl = pt, pl
    d.dh = d.dw = 1
    d.groups, d.nhwc, d.dw_rows = c, 0, dw_rows
    xin = x.astype(bfloat16).view(np.uint16) if x_bf16 else x
    y = np.empty((1, c * m, oh, ow), np.uint16 if y_bf16 else np.float32)
    used = lib.op_conv2d_dw_f32(d, ffi.from_buffer(xin), int(x_bf16), ffi.from_buffer(wt), 0,
                                ffi.from_buffer("float[]", b), ffi.from_buffer(y), int(y_bf16), act,
                                threads)
    assert used >= 1
    got = y.view(bfloat16).astype(np.float64) if y_bf16 else y.astype(np.float64)
    pads = ((pt, max(0, (oh - 1) * s + 3 - h - pt)), (pl, max(0, (ow - 1) * s + 3 - w - pl)))
    wk = wt[:, np.newaxis]
    ref = reference_conv2d(x, wk, b, (s, s), pads, (1, 1), c)
    mag = reference_conv2d(np.abs(x), np.abs(wk), np.abs(b), (s, s), pads, (1, 1), c)
    return got, ref, mag


@pytest.mark.parametrize("io", ["f32", "bf16", "bf16_yb"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_depthwise_row_kernels(level, case, io):
    """dw_rows = 1 (the row-register kernels where the geometry fits), and 3 where bit 2 changes the
    kernel, agree with the float64 reference, without activation and with relu (the
    activation-specialised and generic copies)."""
    mod = load(level)
    onepath._stats.record("conv2d", "bfloat16" if io != "f32" else "float32", level)
    x_bf16, y_bf16 = io != "f32", io == "bf16_yb"
    # dw_rows 3: bit 2 as well (bfloat16 stride-1 rows of more than 16 columns: the plane widened)
    for act, threads, dw_rows in ((0, 1, 1), (1, 2, 1), (0, 1, 3), (1, 2, 3)):  # OP_ACT_NONE, OP_ACT_RELU
        if dw_rows == 3 and not (x_bf16 and case[3] == 1 and case[2] > 16):
            continue
        got, ref, mag = _run(mod.lib, mod.ffi, case, x_bf16, y_bf16, act, dw_rows, threads)
        if act == 1:
            ref = np.maximum(ref, 0.0)
        tol = 16 * EPS32 * mag + 1e-6 + (np.abs(ref) * 2.0 ** -8 if y_bf16 else 0.0)
        assert got.shape == ref.shape
        err = np.abs(got - ref)
        assert np.all(err <= tol), f"max err {err.max():.3e}"


@pytest.mark.parametrize("w", [32, 56, 112, 136, 264])
def test_depthwise_stride2_f32_any_alignment(level, w):
    """Float32 stride 2 (op_dw3_s2w, whose block grid moves with the input's alignment) agrees with the
    float64 reference at every start offset of the input mod 64 bytes, left padding 1 (where the grid
    may move) and 2, with and without relu, over one and several 64-output chunks."""
    mod = load(level)
    onepath._stats.record("conv2d", "float32", level)
    for offset in range(16):
        for pl, act, threads in ((1, 0, 1), (1, 1, 2), (2, 0, 1)):
            got, ref, mag = _run(mod.lib, mod.ffi, (3, 7, w, 2, (1, pl), 1), False, False, act, 1,
                                 threads, offset)
            if act == 1:
                ref = np.maximum(ref, 0.0)
            err = np.abs(got - ref)
            assert np.all(err <= 16 * EPS32 * mag + 1e-6), f"offset {offset} pl {pl}: {err.max():.3e}"


def test_dw_row_kernels_rule():
    """The per-microarchitecture rule: Zen 4 and the Intel AMX class ask for them on their measured
    shapes only, and a microarchitecture without a row keeps the default kernels."""
    row = registry.Kernel("conv2d", "float32", "avx512_core", "op_conv2d_dw_f32", "x", 1, 16,
                          algorithm="depthwise")
    assert registry.dw_row_kernels(row, (1, 1), 112, False, uarch="zen4")
    assert registry.dw_row_kernels(row, (2, 2), 56, True, uarch="zen4")
    assert registry.dw_row_kernels(row, (1, 1), 14, True, uarch="zen4")
    assert registry.dw_row_kernels(row, (1, 1), 7, True, uarch="zen4")   # narrow rows (<= 8)
    assert registry.dw_row_kernels(row, (1, 1), 7, False, uarch="zen4")
    assert not registry.dw_row_kernels(row, (1, 1), 9, False, uarch="zen4")
    assert registry.dw_row_kernels(row, (2, 2), 14, False, uarch="zen4")   # narrow, stride 2 (<= 16)
    assert not registry.dw_row_kernels(row, (2, 2), 20, False, uarch="zen4")
    assert not registry.dw_row_kernels(row, (1, 1), 14, False, uarch="zen4")
    assert not registry.dw_row_kernels(row, (2, 1), 112, False, uarch="zen4")
    assert not registry.dw_row_kernels(row, (1, 1), 112, False, uarch="sapphirerapids")
    # the Intel AMX class: stride-2 rows from 28 columns and the narrow rows, not zen4's stride-1 rows
    assert registry.dw_row_kernels(row, (1, 1), 7, False, uarch="sapphirerapids")
    assert registry.dw_row_kernels(row, (2, 2), 14, True, uarch="sapphirerapids")
    assert registry.dw_row_kernels(row, (2, 2), 56, False, uarch="sapphirerapids")
    assert not registry.dw_row_kernels(row, (1, 1), 56, False, uarch="sapphirerapids")
    assert not registry.dw_row_kernels(row, (2, 2), 112, False, uarch="no-such-uarch")
    # batch cap of the wide float32 stride-1 rows only (narrow rows, bfloat16 and stride 2 keep them)
    assert not registry.dw_row_kernels(row, (1, 1), 112, False, uarch="zen4", n=8)
    assert registry.dw_row_kernels(row, (1, 1), 7, False, uarch="zen4", n=8)
    assert registry.dw_row_kernels(row, (2, 2), 112, False, uarch="zen4", n=8)
    assert registry.dw_row_kernels(row, (1, 1), 14, True, uarch="zen4", n=8)
    # dw_rows bit 2: bfloat16 stride-1 rows of more than 64 columns widened first
    assert registry.dw_row_flags(row, (1, 1), 112, True, uarch="zen4") == 3
    assert registry.dw_row_flags(row, (1, 1), 112, True, uarch="zen4", n=8) == 3
    assert registry.dw_row_flags(row, (1, 1), 56, True, uarch="zen4") == 1
    assert registry.dw_row_flags(row, (1, 1), 112, False, uarch="zen4") == 1
    assert registry.dw_row_flags(row, (2, 2), 112, True, uarch="zen4") == 1
    assert registry.dw_row_flags(row, (1, 1), 112, True, uarch="sapphirerapids") == 0
