"""python -m onepath bench compare on doctored bench JSON: a 30 % slower row is flagged, identical runs
are not, different fingerprints are never judged, and the plot is written."""
from __future__ import annotations

import copy
import json

import pytest

from onepath.__main__ import main
from onepath.bench import compare

SAMPLES = [1.00e-3, 1.02e-3, 0.99e-3, 1.01e-3, 1.03e-3, 1.00e-3, 0.98e-3]


def _row(name, samples, flops=2e9, base=1.1e-3):
    med = sorted(samples)[len(samples) // 2]
    return {"suite": "matmul", "group": "square", "name": name, "flops": flops,
            "impls": {"onepath": {"seconds": med, "gflops": flops / med / 1e9, "samples": list(samples)},
                      "numpy": {"seconds": base, "gflops": flops / base / 1e9, "samples": [base] * len(samples)}},
            "pct_peak": 50.0, "ratios": {"numpy": base / med}}


def _run(vendor="AuthenticAMD", uarch="zen4", scale=None):
    scale = scale or {}
    rows = [_row(n, [s * scale.get(n, 1.0) for s in SAMPLES]) for n in ("512x512x512", "1024x1024x1024")]
    return {"schema": 1, "fingerprint": {"vendor": vendor, "brand": "cpu", "family": 25, "model": 17,
                                         "stepping": 1, "uarch": uarch, "level": "avx512_core_bf16",
                                         "threads": 2},
            "results": rows}


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_flags_a_30_percent_slower_row(tmp_path, capsys):
    a = _write(tmp_path, "a.json", _run())
    b = _write(tmp_path, "b.json", _run(scale={"1024x1024x1024": 1.3}))
    assert main(["bench", "compare", a, b, "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "1 regression(s): matmul/1024x1024x1024" in out
    res = compare.compare([compare.load(a), compare.load(b)])
    verdicts = {r["name"]: r["judged"][1]["verdict"] for r in res["suites"]["matmul"]}
    assert verdicts == {"512x512x512": "same", "1024x1024x1024": "regression"}
    assert main(["bench", "compare", a, b]) == 0  # reported, exit 0 without --fail-on-regression


def test_identical_runs_and_small_changes_pass(tmp_path):
    a = _write(tmp_path, "a.json", _run())
    b = _write(tmp_path, "b.json", _run())
    c = _write(tmp_path, "c.json", _run(scale={"512x512x512": 1.05}))  # significant but < 10 %
    assert main(["bench", "compare", a, b, c, "--fail-on-regression"]) == 0


def test_different_fingerprints_are_never_judged(tmp_path, capsys):
    a = _write(tmp_path, "a.json", _run())
    b = _write(tmp_path, "b.json", _run("GenuineIntel", "sapphire_rapids", scale={"512x512x512": 2.0}))
    assert main(["bench", "compare", a, b, "--fail-on-regression"]) == 0
    res = compare.compare([compare.load(a), compare.load(b)])
    assert res["runners"] == ["AuthenticAMD zen4 avx512_core_bf16 2t",
                              "GenuineIntel sapphire_rapids avx512_core_bf16 2t"]
    assert all(j is None for r in res["suites"]["matmul"] for j in r["judged"])


def test_rows_without_samples_are_not_judged(tmp_path):
    old, new = _run(), _run(scale={"512x512x512": 1.5})
    for doc in (old, new):
        for r in doc["results"]:
            del r["impls"]["onepath"]["samples"]
    res = compare.compare([old, new])
    assert {r["judged"][1]["verdict"] for r in res["suites"]["matmul"]} == {"not judged"}


def test_plot_has_a_bar_group_per_runner(tmp_path):
    pytest.importorskip("matplotlib")
    a = _write(tmp_path, "a.json", _run())
    b = _write(tmp_path, "b.json", _run("GenuineIntel", "sapphire_rapids"))
    png = tmp_path / "cmp.png"
    assert main(["bench", "compare", a, b, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input(tmp_path, capsys):
    p = _write(tmp_path, "x.json", {"hello": 1})
    assert main(["bench", "compare", p]) == 2
    assert "not a `python -m onepath bench --json` file" in capsys.readouterr().err


def test_real_bench_json_has_samples(tmp_path):
    """The bench JSON itself stores the raw samples compare needs."""
    from onepath.bench import cli
    out = tmp_path / "run.json"
    with open(tmp_path / "log.txt", "w") as log:
        doc = cli.run(threads=1, quick=True, suites=["matmul"], shapes=[32], repeat=3,
                      min_time=0.001, json_path=str(out), peak=False, progress=False, out=log)
    samples = doc["results"][0]["impls"]["onepath"]["samples"]
    assert len(samples) == 3 and all(s > 0 for s in samples)
    res = compare.compare([compare.load(str(out)), copy.deepcopy(compare.load(str(out)))])
    assert res["regressions"] == []


def test_alpha_and_min_effect_are_checked(tmp_path, capsys):
    run = _write(tmp_path, "a.json", _run())
    for bad in (["--alpha", "2"], ["--alpha", "0"], ["--min-effect", "-1"]):
        with pytest.raises(SystemExit) as e:
            main(["bench", "compare", run, run, *bad])
        assert e.value.code == 2
    assert "--alpha must be between 0 and 1" in capsys.readouterr().err


def test_without_scipy_says_why_and_cannot_gate(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # import fails as if scipy were missing
    a = _write(tmp_path, "a.json", _run())
    b = _write(tmp_path, "b.json", _run(scale={"512x512x512": 1.3}))
    assert main(["bench", "compare", a, b]) == 0
    assert "scipy is not installed (pip install scipy)" in capsys.readouterr().err
    assert main(["bench", "compare", a, b, "--fail-on-regression"]) == 2
    assert "no row could be judged" in capsys.readouterr().err
