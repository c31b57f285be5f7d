"""Helpers for the tests that force bits of ``op_conv_bf16_options`` (kernels/conv_bf16.c; the
registry's CONV_BF16_OPTIONS): the options are module-wide C state, so every change is undone."""
from __future__ import annotations

import contextlib

import numpy as np

from onepath.kernels import load
from onepath.ops.conv import select_conv


def conv_bf16_lib():
    """The compiled module the bfloat16 conv rows run at on this host (its options are per module)."""
    return load(select_conv("implicit_gemm", "bfloat16").level).lib


@contextlib.contextmanager
def bf16_options(flags: int):
    """Run the block with ``op_conv_bf16_options(flags)``, then restore the previous bits."""
    lib = conv_bf16_lib()
    old = lib.op_conv_bf16_options(-1)
    lib.op_conv_bf16_options(flags)
    try:
        yield old
    finally:
        lib.op_conv_bf16_options(old)


def shipped_bf16_options() -> int:
    """The bits in force now (what dispatch set for this host)."""
    return conv_bf16_lib().op_conv_bf16_options(-1)


def assert_same_bits(option_sets, compute, nan_index: int = 0):
    """``compute()`` (a list of arrays) under each bit set of ``option_sets``: every result bit for bit
    equal to the first set's, and the first set's ``nan_index``-th array holds a NaN (the inputs' NaN /
    Inf reached the output, so the comparison covered non-finite values)."""
    out = []
    for flags in option_sets:
        with bf16_options(flags):
            out.append([np.asarray(a, np.float32) for a in compute()])
    for other in out[1:]:
        for u, v in zip(out[0], other):
            np.testing.assert_array_equal(u, v)
    assert np.isnan(out[0][nan_index]).any()
