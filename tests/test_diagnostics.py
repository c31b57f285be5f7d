"""Diagnostics that never crash and what a user installs (issue 12): invalid ONEPATH_* variables
under ``info`` / ``bench``, thread counts above the CPUs, the bench without torch, py-cpuinfo
optional."""
from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import warnings

import pytest

import onepath
from conftest import PKG_ROOT
from onepath import _threads


def run_py(args, env_extra=None, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(PKG_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("ONEPATH_MAX_ISA", "ONEPATH_NUM_THREADS", "ONEPATH_REPRODUCIBLE"):
        env.pop(k, None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], cwd=PKG_ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


# -- fault 3: invalid variables: one line naming the variable and its valid values, exit 2 ---------

@pytest.mark.parametrize("var, value, valid", [("ONEPATH_MAX_ISA", "amx", "generic, avx2"),
                                               ("ONEPATH_NUM_THREADS", "abc", "1 to 1024"),
                                               ("ONEPATH_NUM_THREADS", "0", "1 to 1024"),
                                               ("ONEPATH_REPRODUCIBLE", "maybe", "1/true/yes/on")])
def test_cli_invalid_env(var, value, valid):
    info = run_py(["-m", "onepath", "info", "--no-py-cpuinfo"], {var: value})
    err = info.stderr.strip().splitlines()
    assert info.returncode == 2 and len(err) == 1, info.stderr
    assert var in err[0] and repr(value) in err[0] and valid in err[0]
    # the rest of the report is still there, the variable marked as ignored
    assert "Kernels (op, dtype" in info.stdout and f"{var}={value}  (invalid" in info.stdout
    bench = run_py(["-m", "onepath", "bench", "--quick", "--no-peak"], {var: value})
    assert bench.returncode == 2 and bench.stderr.strip() == err[0] and not bench.stdout


def test_invalid_reproducible_env_raises_at_the_first_call_not_the_import():
    code = ("import numpy as np, onepath\n"
            "try:\n    onepath.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))\n"
            "except ValueError as exc:\n    print('ValueError', exc)")
    r = run_py(["-c", code], {"ONEPATH_REPRODUCIBLE": "maybe"})
    assert r.returncode == 0 and r.stdout.startswith("ValueError ONEPATH_REPRODUCIBLE='maybe'"), r.stderr


@pytest.mark.parametrize("args", [["bench", "--quick", "--json", "/nonexistent-dir/x.json"],
                                  ["bench", "--quick", "--threads", "5000"],
                                  ["golden", "--write", "/nonexistent-dir/x.json"],
                                  ["golden", "--check", "x.json", "--threads", "5000"],
                                  ["tune", "--quick", "--out", "/nonexistent-dir/t.json"],
                                  ["tune", "--quick", "--json", "/"]])
def test_cli_bad_arguments_one_line(args):
    """Found before any work is done: one line on stderr, exit 2, no traceback."""
    r = run_py(["-m", "onepath", *args])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("onepath: error: ") and not r.stdout


# -- fault 4: threads above the CPUs, non-int counts ---------------------------------------------

def test_threads_above_cpus_warn_once_and_cap(cpus, monkeypatch):
    cpus(2)
    monkeypatch.setattr(_threads, "_warned", False)
    old = onepath.get_num_threads()
    try:
        with pytest.warns(RuntimeWarning, match=r"1000 threads .* 2 CPUs"):
            onepath.set_num_threads(1000)
        assert onepath.get_num_threads() == 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per process
            onepath.set_num_threads(500)
            assert onepath.get_num_threads() == 2
    finally:
        onepath.set_num_threads(min(old, 2))


def test_env_threads_above_cpus_start_no_extra_workers():
    """ONEPATH_NUM_THREADS=1000 on this host: a warning, and a 512^3 product starts at most
    CPUs - 1 workers (it started 65 on 2 CPUs)."""
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc/self/task to count threads")
    code = ("import os, numpy as np, onepath\n"
            "a = np.ones((512, 512), np.float32)\n"
            "n0 = len(os.listdir('/proc/self/task'))\n"
            "onepath.matmul(a, a)\n"
            "print(onepath.get_num_threads(), len(os.listdir('/proc/self/task')) - n0)\n")
    r = run_py(["-c", code], {"ONEPATH_NUM_THREADS": "1000"})
    assert r.returncode == 0, r.stderr
    used, started = map(int, r.stdout.split())
    ncpu = len(os.sched_getaffinity(0))
    assert used == ncpu and started <= ncpu - 1
    assert "RuntimeWarning" in r.stderr and "ONEPATH_NUM_THREADS=1000" in r.stderr


# -- fault 5: the bench without torch ---------------------------------------------------------------

def test_bench_without_torch_says_so():
    code = ("import sys; sys.modules['torch'] = None\n"  # torch made unimportable
            "from onepath.__main__ import main\n"
            "sys.exit(main(['bench', '--quick', '--suite', 'conv', '--suite', 'bf16', '--shapes', '16',"
            " '--repeat', '1', '--min-time', '0.001', '--no-peak']))\n")
    r = run_py(["-c", code])
    assert r.returncode == 0, r.stderr
    assert "vs torch" not in r.stdout and "no torch baseline" in r.stdout
    assert "pip install torch==2.13.0" in r.stdout
    assert "conv2d: ResNet-50 layers (no baseline)" in r.stdout
    assert "bfloat16 matmul / linear: geometric mean per group" in r.stdout  # a 1-row group too


def test_geomean_of_every_group():
    from onepath.bench.cli import geomean_table
    from onepath.bench.core import Suite
    rows = [{"group": "a", "ratios": {"numpy": 2.0}}, {"group": "b", "ratios": {"numpy": 4.0}},
            {"group": "b", "ratios": {"numpy": 1.0}}, {"group": "c", "ratios": {}}]
    title, headers, cells = geomean_table(Suite("s", None, "S"), rows)
    assert headers == ["group", "rows", "geomean x numpy"]
    assert cells == [["a", "1", "2.00"], ["b", "2", "2.00"], ["c", "1", "-"]]
    assert geomean_table(Suite("s", None, "S"), [{"group": "a", "ratios": {}}]) is None


# -- fault 7: py-cpuinfo optional, one cpuinfo ---------------------------------------------------

def test_info_without_py_cpuinfo(monkeypatch):
    from onepath import info
    from onepath.dispatch import probe
    monkeypatch.setitem(sys.modules, "cpuinfo", None)  # not installed
    pc = info.py_cpuinfo(probe())
    assert pc["available"] is False and "pip install" in pc["error"] and "onepath[info]" in pc["error"]


def test_one_cpuinfo_distribution():
    """py-cpuinfo and its fork py-cpuinfo2 install into the same cpuinfo/ folder: the extras must
    not bring both (pytest-benchmark 5.3 requires the fork, so the info extra names it too), and
    onepath itself needs neither."""
    installed = set()
    for name in ("py-cpuinfo", "py-cpuinfo2"):
        try:
            md.distribution(name)
            installed.add(name)
        except md.PackageNotFoundError:
            pass
    if installed:  # whichever is installed, the one cpuinfo module works
        import cpuinfo
        assert cpuinfo.get_cpu_info().get("arch")
    try:
        reqs = md.requires("onepath") or []
    except md.PackageNotFoundError:
        pytest.skip("onepath is not installed (run from the source tree)")
    # the extras name one distribution between them (the [test] install leaves one cpuinfo/)
    named = {r.split(">")[0].split("=")[0].split(";")[0].strip().lower() for r in reqs}
    assert not {"py-cpuinfo", "py-cpuinfo2"} <= named, reqs
    runtime = [r for r in reqs if "extra ==" not in r]
    assert not any(r.lower().startswith("py-cpuinfo") for r in runtime), runtime
    assert any(r.startswith("py-cpuinfo2") and 'extra == "info"' in r for r in reqs), reqs


def test_info_lists_the_uarch_variants_in_force():
    """info's variant table is exactly the registry rules for this host's levels (Zen 4 here: the
    bf16, thin-product and depthwise rules; a host without rows shows none)."""
    import onepath
    from onepath import info
    from onepath.dispatch import registry
    rows = info.variant_rows()
    want = {(lv, "BF16_VARIANTS") for lv in onepath.available_isas() if registry.bf16_variants(lv)}
    assert want <= {(r["level"], r["rule"]) for r in rows}
    for r in rows:
        assert r["level"] in onepath.available_isas() and r["value"]
    text = info.render(info.collect(with_py_cpuinfo=False))
    assert ("Kernel variants for this microarchitecture" in text) == bool(rows)
