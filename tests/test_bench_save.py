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
    doc = cli.run(threads=1, suites=["matmul"], shapes=(32, 48), repeat=2, min_time=0.001, peak=False,
                  progress=False, out=io.StringIO(), save_results=True)
    (path,) = (tmp_path / "results" / "vendor-uarch").glob("*.json")
    assert re.fullmatch(r"\d{8}T\d{6}Z-matmul-1t\.json", path.name), path.name
    saved = json.loads(path.read_text())
    assert saved["fingerprint"]["uarch"] == doc["fingerprint"]["uarch"]
    assert saved["fingerprint"]["tuning"]["mode"] in ("default", "explicit", "off")
    for row in saved["results"]:
        for impl in row["impls"].values():
            assert len(impl["samples"]) == 2 and all(s > 0 for s in impl["samples"])
        assert row["kernel_blocking"][3] in ("tuning file", "shipped", "cache model")
