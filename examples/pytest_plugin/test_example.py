"""A user's suite with the onepath.testing plugin (``pytest --onepath-isa=all``): each test below runs
once per ISA level this runner can execute, and levels it cannot execute are skipped, so the test ids
are the same on every runner of a mixed Intel/AMD CI pool."""
import numpy as np
import pytest

import onepath


def test_matmul_every_level(onepath_level):
    """The fixture forces the level: onepath.isa() is it inside the test."""
    assert onepath.isa() == onepath_level
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(onepath.matmul(a, np.eye(4, dtype=np.float32)), a)


@pytest.mark.onepath_levels
def test_reproducible_bits_every_level(request):
    """The marker does the same for a test that does not take the fixture."""
    assert onepath.isa() == request.node.callspec.params["onepath_level"]
    x = np.linspace(-3, 3, 48, dtype=np.float32).reshape(6, 8)
    with onepath.reproducible():
        y = onepath.linear(x, np.ones((5, 8), np.float32) / 3, activation="gelu")
    assert y.tobytes().hex()[:16] == EXPECTED_PREFIX or EXPECTED_PREFIX is None


EXPECTED_PREFIX = None  # a suite pins its golden bits here (same on every level and runner)


def test_benchmark_fingerprint(benchmark):
    """pytest-benchmark's JSON gets onepath's fingerprint under machine_info["onepath"]."""
    a = np.ones((16, 16), np.float32)
    benchmark(onepath.matmul, a, a)
