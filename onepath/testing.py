"""``onepath.testing``: a pytest plugin for suites that run onepath on mixed Intel and AMD CI runners.

Registered through the ``pytest11`` entry point when onepath is installed (``pip install onepath``),
else load it with ``pytest -p onepath.testing`` or ``pytest_plugins = ["onepath.testing"]``.

- ``onepath_level`` fixture: the test runs once per ISA level (ids ``[generic]``, ``[avx2]``, ...)
  with that level forced by a scoped ``onepath.max_isa`` cap; a level this runner cannot execute
  (or above the process cap ``ONEPATH_MAX_ISA``) is skipped, so test ids match across runners.
- ``@pytest.mark.onepath_levels`` (optionally ``("avx2", "avx512_core")``): the same for a test
  that does not take the fixture.
- ``--onepath-isa=all|LEVEL[,LEVEL...]``: the levels those tests run at (default ``all``); an
  unknown level name is a usage error.
- Kernel-coverage report at the end of the run (which registry kernels ran at which level, which
  this host cannot run, which it could run but did not): printed with ``--onepath-isa``,
  ``--onepath-coverage`` or the ini option ``onepath_coverage = true``.
- ``pytest_benchmark_update_machine_info``: adds onepath's fingerprint (vendor, brand, uarch,
  family/model, level in force, levels, features, caches, reproducible mode) under ``"onepath"`` to
  pytest-benchmark's ``machine_info``, so saved benchmark runs from different runners are told apart.
"""
from __future__ import annotations

import pytest

_LEVELS_KEY = "onepath_levels"


def pytest_addoption(parser):
    group = parser.getgroup("onepath", "onepath ISA levels and kernel coverage")
    group.addoption("--onepath-isa", action="store", default=None, metavar="all|LEVEL[,LEVEL...]",
                    help="ISA levels at which tests using the onepath_level fixture or the "
                         "onepath_levels marker run (default: all; levels this host cannot run skip)")
    group.addoption("--onepath-coverage", action="store_true", default=False,
                    help="print which onepath kernels the run exercised at each level")
    parser.addini("onepath_coverage", "print onepath's kernel-coverage report (true/false)", type="bool",
                  default=False)


def _chosen_levels(config) -> tuple[str, ...]:
    from onepath.dispatch.levels import LEVELS, check_level
    opt = config.getoption("--onepath-isa") or "all"
    if opt.strip().lower() == "all":
        return LEVELS
    out = []
    for name in opt.split(","):
        if not name.strip():
            continue
        try:
            out.append(check_level(name))
        except ValueError as exc:
            raise pytest.UsageError(f"--onepath-isa: {exc}") from None
    if not out:
        raise pytest.UsageError("--onepath-isa: no level given (use all or LEVEL[,LEVEL...])")
    return tuple(dict.fromkeys(out))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "onepath_levels(*levels): run the test once per onepath ISA level "
                   "(--onepath-isa chooses them; the marker's arguments restrict them)")
    config._onepath_levels = _chosen_levels(config)


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker(_LEVELS_KEY)
    if "onepath_level" not in metafunc.fixturenames:
        if marker is None:
            return
        metafunc.fixturenames.append("onepath_level")
    levels = metafunc.config._onepath_levels
    if marker is not None and marker.args:
        from onepath.dispatch.levels import check_level
        wanted = {check_level(a) for a in marker.args}
        levels = tuple(lv for lv in levels if lv in wanted)
    metafunc.parametrize("onepath_level", levels, indirect=True, ids=list(levels))


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item):
    """A test with the marker but without the fixture: set the fixture up now (after pytest filled
    the test's own fixtures), so its level is forced, or the test skipped, as with the fixture."""
    if item.get_closest_marker(_LEVELS_KEY) is None:
        return
    funcargs = getattr(item, "funcargs", None)
    if funcargs is not None and "onepath_level" not in funcargs:
        funcargs["onepath_level"] = item._request.getfixturevalue("onepath_level")


@pytest.fixture
def onepath_level(request):
    """The ISA level this run of the test is forced to (``with onepath.max_isa(level)``); skipped
    where the host cannot run it or the process cap (ONEPATH_MAX_ISA) is below it."""
    import onepath
    from onepath.dispatch.levels import LEVELS
    name = getattr(request, "param", None)
    if name is None:  # used outside the parametrisation (e.g. requested dynamically): the level in force
        yield onepath.isa()
        return
    avail = onepath.available_isas()
    if name not in avail:
        pytest.skip(f"{name} cannot run on this host (levels here: {', '.join(avail)})")
    if LEVELS.index(name) > LEVELS.index(onepath.isa()):
        pytest.skip(f"{name} is above the process cap {onepath.isa()!r} (ONEPATH_MAX_ISA)")
    with onepath.max_isa(name):
        yield name


def _coverage_wanted(config) -> bool:
    return bool(config.getoption("--onepath-isa") or config.getoption("--onepath-coverage")
                or config.getini("onepath_coverage"))


def coverage_lines() -> list[str]:
    """The kernel-coverage report: every registry row with exercised / NOT exercised / cannot run
    on this host, then kernels that ran outside the registry (the reproducible mode's, ...)."""
    from onepath import _stats
    from onepath.dispatch import REGISTRY, probe
    cpu = probe()
    lines = [f"host: {cpu.vendor} {cpu.brand} | uarch {cpu.uarch} | levels: {', '.join(cpu.levels)}"]
    seen = _stats.exercised()
    seen_algo = _stats.exercised_algorithms()
    by_algo = {k[:3] for k in seen_algo}
    for row in REGISTRY:
        key = (row.op, row.dtype, row.level)
        # rows whose op records its algorithm (matmul's gemm / small) count only when that one ran
        if key + (row.algorithm,) in seen_algo or (key in seen and key not in by_algo):
            state = "exercised"
        elif row.level not in cpu.levels:
            state = "cannot run on this host"
        else:
            state = "NOT exercised"
        lines.append(f"  {row.op:8s} {row.dtype:9s} {row.level:17s} {row.name:32s} {state}")
    known = {(r.op, r.dtype, r.level) for r in REGISTRY}
    for key in sorted(k for k in seen if k not in known):
        lines.append(f"  {key[0]:8s} {key[1]:9s} {key[2]:17s} {'(outside the registry)':32s} exercised")
    return lines


def pytest_terminal_summary(terminalreporter, config):
    if not _coverage_wanted(config):
        return
    tr = terminalreporter
    tr.section("onepath kernel coverage")
    try:
        lines = coverage_lines()
    except Exception as exc:  # noqa: BLE001 - the probe itself failed: say so, do not fail the run
        lines = [f"probe failed: {exc}"]
    for line in lines:
        tr.write_line(line)


def fingerprint() -> dict:
    """onepath's fingerprint of this runner (JSON-ready)."""
    import onepath
    from onepath.dispatch import probe
    cpu = probe()
    return {"vendor": cpu.vendor, "brand": cpu.brand, "uarch": cpu.uarch, "family": cpu.family,
            "model": cpu.model, "stepping": cpu.stepping, "level": onepath.isa(),
            "available_isas": list(onepath.available_isas()), "features": sorted(cpu.features),
            "caches": dict(cpu.caches), "reproducible": onepath.is_reproducible(),
            "onepath_version": onepath.__version__}


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    """pytest-benchmark's hook: add onepath's fingerprint under machine_info["onepath"]."""
    try:
        machine_info["onepath"] = fingerprint()
    except Exception as exc:  # noqa: BLE001 - never break a benchmark run over the fingerprint
        machine_info["onepath"] = {"error": f"{type(exc).__name__}: {exc}"}
