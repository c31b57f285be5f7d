"""``python -m onepath bench --save``: the run's JSON (fingerprint, raw timing samples) under
benchmarks/results/<vendor>-<uarch>/ (redirected to a temporary folder here)."""
from __future__ import annotations

import io
import json
import re

from onepath.bench import cli


def test_save_writes_fingerprint_and_samples(tmp_path, monkeypatch):
    fp0 = cli.fingerprint(1)
    assert cli.results_dir(fp0).parent.name == "results"          # the real place, not written here
    assert cli.results_dir(fp0).name == re.sub(r"[^a-z0-9_.-]", "_", cli.results_dir(fp0).name)
    monkeypatch.setattr(cli, "results_dir", lambda fp: tmp_path / "results" / "vendor-uarch")
    doc = cli.run(threads=1, suites=["matmul"], shapes=(32, 300), repeat=2, min_time=0.001, peak=False,
                  progress=False, out=io.StringIO(), save_results=True)
    (path,) = (tmp_path / "results" / "vendor-uarch").glob("*.json")
    assert re.fullmatch(r"\d{8}T\d{6}Z-matmul-1t\.json", path.name), path.name
    saved = json.loads(path.read_text())
    assert saved["fingerprint"]["uarch"] == doc["fingerprint"]["uarch"]
    assert saved["fingerprint"]["tuning"]["mode"] in ("default", "explicit", "off")
    for row in saved["results"]:
        for impl in row["impls"].values():
            assert len(impl["samples"]) == 2 and all(s > 0 for s in impl["samples"])
        if "small" in row["kernel"]:  # 32^3: the small kernel, which has no cache blocking
            assert row["kernel_blocking"] is None
        else:  # 300^3: the packed GEMM, its blocking and where it came from
            assert row["kernel_blocking"][3] in ("tuning file", "shipped", "cache model")
    assert {"small" in row["kernel"] for row in saved["results"]} == {True, False}


def test_results_markdown_side_by_side(tmp_path, monkeypatch):
    from onepath.bench import results
    monkeypatch.setattr(cli, "results_dir", lambda fp: tmp_path / "benchmarks" / "results" / "amd-zen4")
    doc = cli.run(threads=1, suites=["matmul"], shapes=(32,), repeat=1, min_time=0.001, peak=False,
                  progress=False, out=io.StringIO())
    doc["options"]["suites_requested"] = False  # as a full default run is named
    cli.save(doc)
    md = results.markdown(tmp_path / "benchmarks" / "results")
    assert "none measured yet" in md                       # the host kind without a run
    assert "| matmul | square | 32x32x32 |" in md and "GFLOP/s" in md


def test_host_kind_names_a_host_that_hides_levels_of_its_uarch():
    """A Zen 4 VM whose CPU model hides AVX-512 saves under amd-zen4-avx2, not amd-zen4: its runs are
    not that microarchitecture's (the results table and README show them apart)."""
    from onepath.dispatch.uarch import hidden_levels
    amd = {"vendor": "AuthenticAMD", "uarch": "zen4"}
    full = ["generic", "avx2", "avx512_core", "avx512_core_bf16"]
    assert cli.host_kind(dict(amd, available_isas=full)) == "amd-zen4"
    assert cli.host_kind(dict(amd, available_isas=full[:2])) == "amd-zen4-avx2"
    assert hidden_levels("zen4", "avx2") == ("avx512_core", "avx512_core_bf16")
    intel = {"vendor": "GenuineIntel", "uarch": "sapphirerapids"}
    assert cli.host_kind(dict(intel, available_isas=full + ["avx512_core_amx"])) == "intel-sapphirerapids"
    assert cli.host_kind(dict(intel, available_isas=full)) == "intel-sapphirerapids-avx512_core_bf16"
    # a uarch without a known native level, or no level list (an old run's fingerprint): plain name
    assert cli.host_kind({"vendor": "AuthenticAMD", "uarch": "zen3", "available_isas": full[:2]}) == "amd-zen3"
    assert cli.host_kind(amd) == "amd-zen4"


def test_results_markdown_titles_a_host_that_hides_levels(tmp_path, monkeypatch):
    from onepath.bench import results
    monkeypatch.setattr(cli, "results_dir", lambda fp: tmp_path / "benchmarks" / "results" / "amd-zen4-avx2")
    doc = cli.run(threads=1, suites=["matmul"], shapes=(32,), repeat=1, min_time=0.001, peak=False,
                  progress=False, out=io.StringIO())
    doc["options"]["suites_requested"] = False
    cli.save(doc)
    md = results.markdown(tmp_path / "benchmarks" / "results")
    assert "**AMD EPYC Zen 4, avx2 only** (`amd-zen4-avx2`)" in md
    assert "**AMD EPYC Zen 4** (`amd-zen4`): none measured yet." in md
