"""Shared fixtures: every ISA level forced in turn, the float64 reference, and the end-of-run report
of which registry kernels this run exercised (for CI on mixed Intel and AMD runners)."""
from __future__ import annotations

import numpy as np
import pytest

import onepath
from onepath.dispatch import LEVELS


def _host_levels():
    return onepath.available_isas()


# Test modules whose per-level tests run twice: with the blocking dispatch picks, and with ODD_BLOCKING
# at every level (every row a tuning file can choose must compute the right answer).
_BLOCKING_MODULES = ("test_matmul", "test_linear", "test_bf16", "test_conv")
# (MC, KC, NC) as a tuning file could give them: odd, smaller than the tests' shapes (several blocks
# per dimension with a partial last one) and not multiples of any MR / NR / k_align (the registry
# rounds MC and NC up as the driver does; float32 KC stays odd).
ODD_BLOCKING = (23, 37, 45)


def pytest_generate_tests(metafunc):
    """Parametrize ``level`` over LEVELS (x the odd blocking in the GEMM / conv test modules)."""
    if "level" not in metafunc.fixturenames:
        return
    odd = metafunc.module.__name__.rsplit(".", 1)[-1] in _BLOCKING_MODULES
    params = [(lv, b) for lv in LEVELS for b in ((False, True) if odd else (False,))]
    metafunc.parametrize("level", params, indirect=True,
                         ids=[lv + ("-oddblk" if b else "") for lv, b in params])


@pytest.fixture
def level(request):
    """Each ISA level in turn, forced with a scoped cap; skipped where the host cannot run it. In
    the GEMM / conv modules also with ODD_BLOCKING as every row's tuned blocking (id ``LEVEL-oddblk``)."""
    import contextlib

    from onepath.dispatch import REGISTRY, tuning
    name, odd = request.param
    if name not in _host_levels():
        pytest.skip(f"{name} cannot run on this host (levels here: {', '.join(_host_levels())})")
    if LEVELS.index(name) > LEVELS.index(onepath.isa()):
        pytest.skip(f"{name} is above the process cap {onepath.isa()!r} (ONEPATH_MAX_ISA)")
    blk = tuning.override({(r.level, r.op, r.dtype): ODD_BLOCKING for r in REGISTRY}) if odd \
        else contextlib.nullcontext()
    with onepath.max_isa(name), blk:
        yield name


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


def pytest_terminal_summary(terminalreporter):
    """Print the (op, dtype, level) kernels this run exercised and those this host cannot run."""
    from onepath import _stats
    from onepath.dispatch import REGISTRY, probe
    try:
        cpu = probe()
    except Exception as exc:  # pragma: no cover - the probe itself failed
        terminalreporter.write_line(f"onepath kernel coverage: probe failed: {exc}")
        return
    tr = terminalreporter
    tr.section("onepath kernel coverage")
    tr.write_line(f"host: {cpu.vendor} {cpu.brand} | uarch {cpu.uarch} | levels: {', '.join(cpu.levels)}")
    seen = _stats.exercised()
    for row in REGISTRY:
        key = (row.op, row.dtype, row.level)
        if key in seen:
            state = "exercised"
        elif row.level not in cpu.levels:
            state = "cannot run on this host"
        else:
            state = "NOT exercised"
        tr.write_line(f"  {row.op:8s} {row.dtype:9s} {row.level:17s} {row.name:32s} {state}")
    extra = sorted(k for k in seen if k not in {(r.op, r.dtype, r.level) for r in REGISTRY})
    for key in extra:
        tr.write_line(f"  {key[0]:8s} {key[1]:9s} {key[2]:17s} {'(outside the registry)':32s} exercised")
