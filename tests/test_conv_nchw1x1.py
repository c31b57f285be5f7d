"""The NCHW 1x1 float32 convolution reading its input in place in the micro-kernel
(op_conv_f32_options bit 256, registry.CONV_F32_FLAGS["nchw1x1_direct_b"]): same bits as the packed
input, and within the reference's bound, at every level the host can run."""
from __future__ import annotations

import numpy as np
import pytest

import onepath
from onepath.ops.conv import select_conv

from test_conv import run_case

# (n, c, h, w, oc): C = 64 (the deepest that reads in place), rows not a multiple of the register
# block (64 = 4 x 14 + 8, 20 <= 2 x 14, 9 < 14), pixels with a column tail (7 x 7 = 49 = 32 + 17,
# 5 x 3 = 15 < 32), C = 65 (deeper: packed, whatever the bit)
CASES = [
    (2, 64, 8, 8, 64),
    (1, 17, 7, 7, 20),
    (3, 5, 5, 3, 9),
    (1, 65, 6, 6, 30),
]


def _same_with_bit_off_and_on(bit, n, c, h, w, oc, stride=1, seed=1, clear=0):
    """conv2d of random NCHW data with op_conv_f32_options ``bit`` off and on (the rest as in force,
    less the bits ``clear``):
    bit-identical results, and the reference check of test_conv.run_case with the bit on."""
    from onepath.kernels import load
    lib = load(select_conv("1x1_gemm", "float32").level).lib
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    old = lib.op_conv_f32_options(-1)
    try:
        got = {}
        for on in (0, bit):
            lib.op_conv_f32_options((old & ~bit & ~clear) | on)
            got[on] = onepath.conv2d(x, wt, b, stride=stride, activation="relu")
        run_case(n, c, h, w, oc, 1, 1, stride=stride, activation="relu", seed=n + c)
        assert np.array_equal(got[0], got[bit])
    finally:
        lib.op_conv_f32_options(old)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_nchw_1x1_direct_b(level, case):
    _same_with_bit_off_and_on(256, *case)

# (n, c, h, w, oc, stride): NCHW 1x1 as one GEMM over all images' pixels (op_conv_f32_options bit
# 512, registry.CONV_F32_FLAGS["nchw1x1_joint"]). Planes of 25 / 16 pixels (a 32-column tile spans
# two or three images), 7 x 7 with C = 600 (K over several KC blocks: the tiles across images
# accumulate in the edge buffer), a non-square plane at stride 3, rows not a multiple of 14, strides
# (2, 1) (a panel of two runs of consecutive pixels, rows apart).
JOINT_CASES = [
    (2, 33, 9, 9, 45, 2),
    (3, 600, 7, 7, 20, 1),
    (4, 40, 13, 11, 70, 3),
    (3, 16, 4, 4, 31, 1),
    (2, 24, 10, 40, 30, (2, 1)),
]


@pytest.mark.parametrize("case", JOINT_CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_nchw_1x1_joint(level, case):
    *shape, s = case
    _same_with_bit_off_and_on(512, *shape, stride=s, seed=2)


# (n, c, h, w, oc, stride): NCHW 1x1 with the weight read in place (op_conv_f32_options bit 1024,
# registry.CONV_F32_FLAGS["nchw1x1_a_in_place"]). 7 x 7 (49 = 32 + 17 columns) with C = 600 (K over
# several KC blocks) and OC = 75 (5 x 14 + a 5-row tail, packed), 14 x 14, OC = 65 (the smallest
# taken), C = 1024 (rows 4 KiB apart: the weight rows copied per KC block, a 5-row tail packed), OC = 64
# (not taken: B may be read in place); strided (the sampled pixels copied first, then stride 1): C = 1024
# rows copied, strides (3, 2) on a non-square plane, an odd input (13 -> 7 at stride 2).
A_CASES = [
    (1, 600, 7, 7, 75, 1),
    (1, 40, 14, 14, 100, 1),
    (1, 17, 5, 3, 65, 1),
    (1, 1024, 3, 3, 75, 1),
    (1, 30, 4, 4, 64, 1),
    (1, 600, 13, 13, 75, 2),
    (1, 1024, 5, 5, 70, 2),
    (1, 20, 9, 8, 66, (3, 2)),
]


@pytest.mark.parametrize("case", A_CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_nchw_1x1_a_in_place(level, case):
    *shape, s = case
    _same_with_bit_off_and_on(1024, *shape, stride=s, seed=3, clear=2048)   # (2048: 49 pixels, below)


# (n, c, h, w, oc, stride): NCHW 1x1 with 49 output pixels in its own kernel (op_conv_f32_options bit
# 2048 with 1024, registry.CONV_F32_FLAGS["nchw1x1_n49"]): pixels 0..47 as 3 vectors, pixel 48 as a
# dot product along the depth. C = 600 (several depth blocks, a depth tail of 8) with OC = 75 (10 x 7
# + a 5-row tail), C = 20 (a depth tail only) with OC = 66, a 1 x 49 plane, strided: C = 1024 (13 ->
# 7 at stride 2), strides (3, 1) (21 x 7 -> 7 x 7); batch 3 (instead of the joint GEMM); with bit 4096
# ("nchw1x1_n49_strided") strided planes of 196 = 4 x 49 (28 -> 14) and 98 (7 x 14) pixels; more
# than 10 runs of 49 (batch 3 x 4 runs, batch 11, batch 5 x 4 runs: the packed input swept in groups
# of 512 KiB per depth block, 10 entries at KC 256, 17 at KC 160; two depth blocks at C = 300).
N49_CASES = [
    (1, 600, 7, 7, 75, 1),
    (1, 20, 7, 7, 66, 1),
    (1, 33, 1, 49, 65, 1),
    (1, 1024, 13, 13, 70, 2),
    (1, 40, 21, 7, 71, (3, 1)),
    (3, 70, 14, 14, 80, 2),
    (1, 40, 28, 28, 70, 2),
    (2, 20, 13, 27, 65, 2),
    (3, 300, 28, 28, 70, 2),
    (11, 20, 7, 7, 66, 1),
    (5, 20, 28, 28, 66, 2),
]


@pytest.mark.parametrize("case", N49_CASES, ids=lambda c: "x".join(map(str, c)).replace(" ", ""))
def test_nchw_1x1_n49(level, cpus, case):
    """Within the reference's bound (bias and relu, no bias and gelu: the epilogue's fast and slow
    activations), and the same bits at 1, 2 and 3 threads (threads split the 7-row blocks) and for
    one image as for the whole batch (the entries' grouping)."""
    from onepath.kernels import load
    *shape, s = case
    n, c, h, w, oc = shape
    lib = load(select_conv("1x1_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(-1)
    nthr = onepath.get_num_threads()
    cpus(4)
    try:
        lib.op_conv_f32_options(old | 1024 | 2048 | 4096)
        run_case(n, c, h, w, oc, 1, 1, stride=s, activation="relu", seed=4)
        run_case(n, c, h, w, oc, 1, 1, stride=s, bias=False, activation="gelu", seed=5)
        rng = np.random.default_rng(6)
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((oc, c, 1, 1)).astype(np.float32)
        got = []
        for t in (1, 2, 3):
            onepath.set_num_threads(t)
            got.append(onepath.conv2d(x, wt, stride=s).view(np.uint32))
        assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])
        if n > 1:
            assert np.array_equal(onepath.conv2d(x[-1:], wt, stride=s).view(np.uint32), got[0][-1:])
    finally:
        onepath.set_num_threads(nthr)
        lib.op_conv_f32_options(old)


def test_nchw_1x1_joint_small(level):
    """Bit 65536 (registry "nchw1x1_joint_small", with 512): the joint GEMM only for strided
    problems and output planes of at most 196 pixels, the plan's text saying which; the other
    problems run the per-image GEMM, the same bits either way (as test_nchw_1x1_joint)."""
    from onepath.kernels import load
    from onepath.ops import conv as _conv
    lib = load(select_conv("1x1_gemm", "float32").level).lib
    old = lib.op_conv_f32_options(-1)
    # (n, c, h, w, oc, stride) -> joint with the bit
    probs = {(2, 16, 14, 14, 24, 1): True, (2, 16, 15, 14, 24, 1): False,
             (2, 16, 30, 30, 24, 2): True, (3, 8, 20, 20, 8, 1): False}
    try:
        lib.op_conv_f32_options(old | 512 | 65536)
        for (n, c, h, w, oc, s), want in probs.items():
            _conv._PLANS.clear()
            x = np.ones((n, c, h, w), np.float32)
            onepath.conv2d(x, np.ones((oc, c, 1, 1), np.float32), None, s)
            (pl,) = _conv._PLANS.values()
            assert pl.text.endswith(",joint") == want, pl.text
        for (n, c, h, w, oc, s) in probs:
            _same_with_bit_off_and_on(65536, n, c, h, w, oc, stride=s, seed=3)
    finally:
        lib.op_conv_f32_options(old)
        _conv._PLANS.clear()


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu", "relu"])
@pytest.mark.parametrize("n,c,h,w,oc", [(3, 16, 7, 7, 64), (2, 40, 9, 9, 30), (3, 24, 5, 3, 20)],
                         ids=["b3c16h7", "b2c40h9", "b3c24h5w3"])
def test_nchw_1x1_joint_activation_same_bits_alone(level, act, n, c, h, w, oc):
    """The joint GEMM (bit 512, "nchw1x1_joint") places an image's pixels in full 16/32-column tiles
    or in edge columns by its place in the batch; the epilogue's gelu / gelu_tanh / silu once took a
    vector polynomial on full rows and libm on edge columns, so an image's bits in a batch differed
    from it alone by up to 2.4e-7 (found by review). Every value now takes the vector form
    (act_f32.c, op_act_lanes): the same bits alone and at every place in the batch."""
    from onepath.kernels import load
    lib = load(select_conv("1x1_gemm", "float32").level).lib
    rng = np.random.default_rng(n * 1000 + c + h)
    x = (rng.standard_normal((n, c, h, w)) * 2).astype(np.float32)
    wt = rng.standard_normal((oc, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    old = lib.op_conv_f32_options(-1)
    try:
        lib.op_conv_f32_options(old | 512)
        yb = onepath.conv2d(x, wt, b, activation=act)
        ys = np.concatenate([onepath.conv2d(x[i:i + 1], wt, b, activation=act) for i in range(n)])
    finally:
        lib.op_conv_f32_options(old)
    np.testing.assert_array_equal(yb.view(np.uint32), ys.view(np.uint32))
