"""onepath's own fixtures. The level machinery (the ``onepath_level`` fixture, ``--onepath-isa``, the
kernel-coverage report) is the ``onepath.testing`` pytest plugin, which any suite can use; this
suite loads it here (an installed onepath also registers it through the ``pytest11`` entry point)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onepath

pytest_plugins = ["onepath.testing", "pytester"]

# The folder holding the onepath these tests import: the source tree of an editable install, or
# site-packages when an unpacked sdist's tests run against the installed wheel. Subprocesses run
# there (cwd and PYTHONPATH) so that they import the same onepath.
PKG_ROOT = Path(onepath.__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def _shipped_tuning():
    """The suite runs on the shipped rows: a tuning file in force when it starts (the one
    ``python -m onepath tune`` wrote for this host, or ONEPATH_TUNING=PATH) is set aside for the
    session (ONEPATH_TUNING=off), since its blocking and choices would override what tests force
    (test_tuning*.py set up their own files)."""
    from onepath.dispatch import tuning
    st = tuning.state()
    if not (st.rows or st.choices):
        yield
        return
    mp = pytest.MonkeyPatch()
    mp.setenv(tuning.ENV, "off")
    tuning.reload()
    yield
    mp.undo()
    tuning.reload()


@pytest.fixture
def cpus(monkeypatch):
    """The affinity mask's CPU count onepath caps threads at, set for one test: ``cpus(4)``
    (e.g. to exercise 3- and 4-thread splits on a 2-CPU host)."""
    from onepath import _threads

    def set_cpus(n: int) -> None:
        monkeypatch.setattr(_threads, "_cpus", n)
    return set_cpus


# Test modules whose per-level tests run twice: with the blocking dispatch picks, and with ODD_BLOCKING
# at every level (every row a tuning file can choose must compute the right answer).
_BLOCKING_MODULES = ("test_matmul", "test_linear", "test_bf16", "test_conv", "test_conv_nchw1x1",
                     "test_conv_nchw1x1_joint_bf16", "test_conv_as_nhwc_image_bf16",
                     "test_conv_as_nhwc_image_f32", "test_conv_brg_nsplit_small_bf16")
# (MC, KC, NC) as a tuning file could give them: odd, smaller than the tests' shapes (several blocks
# per dimension with a partial last one) and not multiples of any MR / NR / k_align (the registry
# rounds MC and NC up as the driver does; float32 KC stays odd).
ODD_BLOCKING = (23, 37, 45)


def pytest_generate_tests(metafunc):
    """In the GEMM / conv test modules, every test of a ``level`` also runs with ODD_BLOCKING."""
    if ("level" in metafunc.fixturenames
            and metafunc.module.__name__.rsplit(".", 1)[-1] in _BLOCKING_MODULES):
        metafunc.fixturenames.append("blocking")
        metafunc.parametrize("blocking", [None, ODD_BLOCKING], indirect=True, ids=["blk", "oddblk"])


@pytest.fixture
def blocking(request):
    """None: the blocking dispatch picks; else (MC, KC, NC) given to every registry row as a tuning
    file would give it."""
    odd = getattr(request, "param", None)
    if odd is None:
        yield None
        return
    from onepath.dispatch import REGISTRY, tuning
    with tuning.override({(r.level, r.op, r.dtype): odd for r in REGISTRY}):
        yield odd


@pytest.fixture
def level(onepath_level, request):
    """Each ISA level in turn (the plugin's ``onepath_level``), forced with a scoped cap; skipped
    where the host cannot run it; in the GEMM / conv modules also with ODD_BLOCKING (``blocking``)."""
    if "blocking" in request.fixturenames:
        request.getfixturevalue("blocking")
    return onepath_level


@pytest.fixture
def nan_filled_outputs(monkeypatch):
    """np.empty hands out float arrays filled with NaN and uint16 ones (bfloat16 bits) with a NaN
    pattern while the test runs: np.empty would often return the block of the previous call's equal
    result, so a route that leaves part of its output unwritten would still compare equal."""
    empty = np.empty

    def filled(*args, **kwargs):
        a = empty(*args, **kwargs)
        if a.dtype.kind == "f":
            a.fill(np.nan)
        elif a.dtype == np.uint16:
            a.fill(0x7FC1)
        return a
    monkeypatch.setattr(np, "empty", filled)


@pytest.fixture
def kxk_as_nhwc(monkeypatch, nan_filled_outputs):
    """Every level of this host's uarch takes the NHWC formulation for NCHW k x k convolutions
    (registry.CONV_NCHW_AS_NHWC), the results allocated NaN-filled (nan_filled_outputs)."""
    from onepath.dispatch import LEVELS, registry
    from onepath.dispatch.cpu import probe
    from onepath.ops import conv as _conv
    table = {(probe().uarch, lv): {"kxk": 1 << 30} for lv in LEVELS}
    monkeypatch.setattr(registry, "CONV_NCHW_AS_NHWC", table)
    _conv._PLANS.clear()
    yield
    _conv._PLANS.clear()


@pytest.fixture(params=[1, 2], ids=["1t", "2t"])
def pool_threads(request):
    """Each test at 1 and 2 threads (onepath.set_num_threads), the previous count restored after."""
    old = onepath.get_num_threads()
    onepath.set_num_threads(request.param)
    yield request.param
    onepath.set_num_threads(old)


@pytest.fixture
def small_mt_on():
    """The threaded small kernel and the thin routing on (ops._small.MT_ON, on as shipped) for one
    test, the matmul fast path's limits re-read."""
    from onepath.ops import _small, matmul
    old, _small.MT_ON = _small.MT_ON, True
    matmul.set_mt_limits()
    yield
    _small.MT_ON = old
    matmul.set_mt_limits()


@pytest.fixture(params=["small", "gemm"])
def small_path(request):
    """Each test twice: as shipped (small products run the small kernel, ops/_small.py), and with
    that path off, so that small shapes exercise the packed GEMM driver and its edges."""
    from onepath.ops import _small
    saved = _small.LIMITS
    if request.param == "gemm":
        _small.LIMITS = {level: (-1, -1) for level in saved}
        _small.reset()
    yield request.param
    if request.param == "gemm":
        _small.LIMITS = saved
        _small.reset()


@pytest.fixture(autouse=True)
def _verbose_from_env():
    """ONEPATH_VERBOSE is read once per process; tests that monkeypatch it get it re-read."""
    from onepath import _verbose
    yield
    _verbose.reload()


@pytest.fixture
def verbose_on(monkeypatch):
    """ONEPATH_VERBOSE=1 for one test."""
    from onepath import _verbose
    monkeypatch.setenv("ONEPATH_VERBOSE", "1")
    _verbose.reload()
    yield


def gemm_tolerance(a64: np.ndarray, b64: np.ndarray, k: int, eps: float = np.finfo(np.float32).eps):
    """Elementwise bound for a float32 product against float64: a multiple of K * eps * (|A| @ |B|)
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.5), plus a floor."""
    return (2.0 * max(k, 1) * eps) * np.matmul(np.abs(a64), np.abs(b64)) + 1e-30


def assert_gemm_close(got, a, b, ref=None):
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if ref is None:
        ref = np.matmul(a64, b64)
    k = a64.shape[-1] if a64.ndim else 1
    aa = a64 if a64.ndim > 1 else a64[np.newaxis, :]
    bb = b64 if b64.ndim > 1 else b64[:, np.newaxis]
    tol = gemm_tolerance(aa, bb, k).reshape(np.shape(ref)) if np.size(ref) else 0
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    err = np.abs(np.asarray(got, np.float64) - ref)
    assert np.all(err <= tol), f"max err {err.max()} vs tol {np.min(tol)} at {np.unravel_index(np.argmax(err - tol), err.shape)}"
