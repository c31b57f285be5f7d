"""bfloat16 NHWC k x k convolutions on the batch-reduce kernel whose threads split the output channels,
with a small weight packed in one pass (kernels/conv_bf16.c OP_CONV_BF16_NSPLIT_SMALL; the registry's
CONV_BF16_OPTIONS "brg_nsplit_small"): forced on and off at every level against the float64 reference,
and bit for bit against the per-task packs it replaces (NaN and Inf inputs, and a non-finite weight)."""
from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import registry

from bf16_options import assert_same_bits, bf16_options, shipped_bf16_options
from test_conv import run_case

SMALL = registry.CONV_BF16_FLAGS["brg_nsplit_small"]


@pytest.mark.parametrize("small", [False, True], ids=["per_task", "one_pass"])
def test_nsplit_small_every_level(level, pool_threads, small):
    # weight (64 x 576) larger than the padded input (9 x 9 x 64): the output channels split
    base = shipped_bf16_options() & ~SMALL
    with bf16_options(base | (SMALL if small else 0)):
        run_case(1, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1, layout="NHWC", bias=True, activation="relu",
                 dtype=bfloat16)


@pytest.mark.parametrize("bad_weight", [False, True], ids=["finite", "inf_weight"])
def test_nsplit_small_same_bits(pool_threads, bad_weight):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 7, 7, 64)).astype(np.float32)
    x[0, 0, 0, 3], x[0, 6, 6, 0], x[0, 3, 0, 63] = np.nan, np.inf, -np.inf
    x = x.astype(bfloat16)
    wt = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    if bad_weight:
        wt[40, 5, 0, 2] = np.inf
    wt = wt.astype(bfloat16)
    b = rng.standard_normal(64).astype(np.float32)
    base = shipped_bf16_options() & ~SMALL

    def compute():
        return [onepath.conv2d(x, wt, b, padding=1, layout="NHWC", activation="relu", dtype=dt)
                for dt in (np.float32, bfloat16)]
    assert_same_bits((base, base | SMALL), compute, nan_index=1)
