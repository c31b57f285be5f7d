"""pytest-benchmark: onepath vs numpy on square float32 matmuls.

Timed only with ``--benchmark-enable`` or ``--benchmark-only`` (e.g.
``pytest tests/test_benchmarks.py --benchmark-enable``); the default ``--benchmark-disable`` runs
each once as a plain test (checking the result), which is cheap.
"""
from __future__ import annotations

import numpy as np
import pytest

import onepath

IMPLS = {"onepath": onepath.matmul, "numpy": np.matmul}


@pytest.fixture(scope="module", params=[256, 512], ids=lambda n: f"n{n}")
def operands(request):
    n = request.param
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return n, a, b, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_matmul_f32_square(benchmark, operands, impl):
    n, a, b, ref = operands
    out = np.empty((n, n), np.float32)
    fn = IMPLS[impl]
    benchmark.group = f"matmul float32 {n}x{n}x{n}"
    benchmark.extra_info.update(impl=impl, n=n, flops=2 * n ** 3, isa=onepath.isa(),
                                threads=onepath.get_num_threads())
    got = benchmark(fn, a, b, out=out)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * np.sqrt(n))


def test_bench_inputs_are_cache_line_aligned():
    """bench.core.aligned: a C-contiguous, equal copy on a 64-byte boundary (every side of a paired
    case reads operands aligned as torch's own tensors are), from any layout and dtype."""
    from ml_dtypes import bfloat16

    from onepath.bench.core import aligned

    rng = np.random.default_rng(0)
    for x in (rng.standard_normal((37, 5), dtype=np.float32),
              rng.standard_normal((6, 7), dtype=np.float32).astype(bfloat16).T,
              np.arange(3, dtype=np.int64)[1:]):
        y = aligned(x)
        assert y.ctypes.data % 64 == 0 and y.flags.c_contiguous
        assert y.shape == x.shape and y.dtype == x.dtype
        np.testing.assert_array_equal(y, x)
