"""The per-host tuning file (onepath/dispatch/tuning.py) and ``python -m onepath tune``: parsing,
precedence (shipped < tuning file < explicit ONEPATH_TUNING), one warning and the shipped rows for a
bad file, and the round trip into the next process. No test asserts a speed."""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import onepath
from onepath.dispatch import probe, registry, select, tuning

from conftest import PKG_ROOT as ROOT  # where the onepath under test lives
KEY = ("matmul", "float32")


def _top_row():
    return select(*KEY, cpu=probe(), level=probe().isa)


def _doc(rows=None, **over):
    cpu = probe()
    top = _top_row()
    rows = rows if rows is not None else [
        {"op": "matmul", "dtype": "float32", "level": top.level, "mc": 2 * top.mr, "kc": 64,
         "nc": 2 * top.nr, "gflops": 1.0}]
    doc = tuning.document(cpu, rows, threads=1, quick=True)
    doc.update(over)
    return doc


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """No tuning file of the user's: XDG_CACHE_HOME in tmp_path, ONEPATH_TUNING unset; state reset
    before and after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(tuning.ENV, raising=False)
    tuning.reload()
    yield monkeypatch
    monkeypatch.undo()
    tuning.reload()


def _write(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


# ---- parsing ----

def test_parse_valid_document():
    doc = _doc()
    top = _top_row()
    assert tuning.parse(doc, probe()) == {(top.level, "matmul", "float32"): (2 * top.mr, 64, 2 * top.nr)}


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format="something-else"), "format"),
    (lambda d: d.update(onepath_version="0.0.1"), "0.0.1"),                      # older version
    (lambda d: d.update(schema=99), "schema"),
    (lambda d: d.update(extra=1), "unknown keys"),                               # unknown top key
    (lambda d: d["rows"][0].update(ukr="fast"), "unknown keys"),                 # unknown row key
    (lambda d: d["cpu"].update(model=d["cpu"]["model"] + 1), "another CPU"),      # foreign CPU
    (lambda d: d["cpu"].update(uarch="not-this-one"), "another CPU"),
    (lambda d: d["cpu"]["caches"].update(l2=d["cpu"]["caches"]["l2"] * 2), "another CPU"),
    (lambda d: d["cpu"].update(socket=0), "exactly the keys"),
    (lambda d: d.pop("rows"), "missing"),
    (lambda d: d["rows"][0].pop("kc"), "missing"),
    (lambda d: d["rows"][0].update(kc=0), "outside"),
    (lambda d: d["rows"][0].update(nc=10 ** 9), "outside"),
    (lambda d: d["rows"][0].update(mc=True), "integer"),
    (lambda d: d["rows"][0].update(mc=128.0), "integer"),
    (lambda d: d["rows"][0].update(level="avx1024"), "no registry kernel"),
    (lambda d: d["rows"][0].update(level=["avx2"]), "no registry kernel"),      # unhashable
    (lambda d: d["rows"][0].update(op={"a": 1}), "no registry kernel"),
    (lambda d: d["rows"].append(dict(d["rows"][0])), "second row"),
    (lambda d: d.update(rows={}), "list"),
])
def test_parse_rejects(mutate, match):
    doc = copy.deepcopy(_doc())
    mutate(doc)
    with pytest.raises(tuning.TuningError, match=match):
        tuning.parse(doc, probe())


def test_parse_rejects_non_object():
    with pytest.raises(tuning.TuningError):
        tuning.parse([1, 2], probe())


@pytest.mark.parametrize("text", ["{not json", "", "\x00\xff", json.dumps({"format": "onepath-tuning"}),
                                  "[" * 100000 + "]" * 100000, '{"mc": ' + "9" * 5000 + "}",
                                  '{"format": "onepath-tuning", "format": "onepath-tuning"}'])
def test_corrupt_file_one_warning_and_shipped_rows(clean, tmp_path, text):
    shipped = select(*KEY)
    path = _write(tmp_path / "bad.json", text)
    clean.setenv(tuning.ENV, str(path))
    with pytest.warns(tuning.TuningWarning, match="tuning file ignored") as rec:
        tuning.reload()
        row = select(*KEY)
        select("conv2d", "float32")
    assert len(rec) == 1
    assert (row.mc, row.kc, row.nc, row.blocking_from) == (shipped.mc, shipped.kc, shipped.nc,
                                                           shipped.blocking_from)
    assert "ignored" in tuning.state().status
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loaded once: no second warning
        a = np.ones((40, 30), np.float32)
        assert np.array_equal(onepath.matmul(a, a.T), np.full((40, 40), 30, np.float32))


def test_warning_names_the_users_call(clean, tmp_path):
    clean.setenv(tuning.ENV, str(_write(tmp_path / "bad.json", "{not json")))
    with pytest.warns(tuning.TuningWarning) as rec:
        tuning.reload()
    assert rec[0].filename == __file__, rec[0].filename
    from onepath.dispatch import registry
    clean.setattr(tuning, "_state", None)  # not read yet: read deep inside, by the kernel options
    with pytest.warns(tuning.TuningWarning) as rec:
        registry.clear_caches()
    assert rec[0].filename == __file__, rec[0].filename


@pytest.mark.parametrize("mutate", [
    lambda d: d["cpu"].update(family=d["cpu"]["family"] + 1),
    lambda d: d.update(onepath_version="0.0.1"),
    lambda d: d.update(future_field=[1]),
])
def test_foreign_stale_or_newer_file_is_ignored_with_a_warning(clean, tmp_path, mutate):
    doc = _doc()
    mutate(doc)
    path = _write(tuning.default_path(), doc)
    with pytest.warns(tuning.TuningWarning, match=str(path.name)):
        tuning.reload()
    assert select(*KEY).blocking_from in ("shipped", "cache model")


def test_missing_default_file_is_silent(clean):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st = tuning.reload()
    assert st.rows == {} and st.mode == "default" and "no tuning file" in st.status


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tuning.cache_dir() == tmp_path / "onepath"
    assert tuning.default_path().parent == tmp_path / "onepath"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid per the spec: ignored
    assert tuning.cache_dir() == Path(os.path.expanduser("~")) / ".cache" / "onepath"


# ---- precedence: shipped < tuning file < explicit ONEPATH_TUNING ----

def test_precedence(clean, tmp_path):
    top = _top_row()
    key = (top.level, "matmul", "float32")
    clean.setitem(registry.TUNING, (probe().uarch,) + key, (3 * top.mr, 48, 3 * top.nr))
    registry.clear_caches()
    row = select(*KEY)
    assert (row.mc, row.kc, row.nc, row.blocking_from) == (3 * top.mr, 48, 3 * top.nr, "shipped")

    def rows_doc(mc, kc, nc):
        return _doc([{"op": "matmul", "dtype": "float32", "level": top.level, "mc": mc, "kc": kc, "nc": nc}])

    _write(tuning.default_path(), rows_doc(4 * top.mr, 80, 4 * top.nr))
    tuning.reload()
    row = select(*KEY)
    assert (row.mc, row.kc, row.nc, row.blocking_from) == (4 * top.mr, 80, 4 * top.nr, "tuning file")
    # rows the file does not name keep the shipped / cache-model blocking
    assert select("matmul", "bfloat16").blocking_from in ("shipped", "cache model")

    explicit = _write(tmp_path / "mine.json", rows_doc(5 * top.mr, 96, 5 * top.nr))
    clean.setenv(tuning.ENV, str(explicit))
    tuning.reload()
    row = select(*KEY)
    assert (row.mc, row.kc, row.nc, row.blocking_from) == (5 * top.mr, 96, 5 * top.nr, "tuning file")
    assert tuning.state().mode == "explicit"

    clean.setenv(tuning.ENV, "off")
    tuning.reload()
    assert select(*KEY).blocking_from == "shipped"

    # another CpuInfo (not the live host) never takes the host's tuning file
    clean.setenv(tuning.ENV, str(explicit))
    tuning.reload()
    other = dataclasses.replace(probe())
    assert select(*KEY, cpu=other).blocking_from == "shipped"


def test_tuned_values_rounded_as_the_driver_runs_them(clean):
    top = _top_row()
    with tuning.override({(top.level, "matmul", "float32"): (top.mr + 1, 37, top.nr + 1)}):
        row = select(*KEY)
        assert (row.mc, row.kc, row.nc) == (2 * top.mr, -(-37 // top.k_align) * top.k_align, 2 * top.nr)
        assert row.blocking_from == "tuning file"
    assert select(*KEY).blocking_from != "tuning file"


def test_info_shows_where_each_row_came_from(clean, tmp_path):
    top = _top_row()
    path = _write(tmp_path / "t.json", _doc())
    clean.setenv(tuning.ENV, str(path))
    tuning.reload()
    from onepath import info
    report = info.collect(with_py_cpuinfo=False)
    assert report["tuning"]["path"] == str(path) and report["tuning"]["rows"] == 1
    froms = {(k["op"], k["dtype"], k.get("algorithm")): k["blocking_from"] for k in report["kernels"]}
    assert froms[("matmul", "float32", "gemm")] == "tuning file"
    assert froms[("conv2d", "float32", "depthwise")] == "unused"
    assert "MC/KC/NC from" in info.render(report)
    assert top.level in json.dumps(report)


# ---- round trip: a file written here is used by the next process ----

_CHILD = """
import json, numpy as np, onepath
from onepath.dispatch import select, tuning
r = select("matmul", "float32")
a = np.arange(60 * 50, dtype=np.float32).reshape(60, 50) % 7
b = np.arange(50 * 70, dtype=np.float32).reshape(50, 70) % 5
ok = bool(np.array_equal(onepath.matmul(a, b), (a.astype(np.float64) @ b).astype(np.float32)))
print(json.dumps({"blk": [r.mc, r.kc, r.nc], "from": r.blocking_from, "ok": ok,
                  "state": tuning.state().as_dict()}))
"""


def _child(env_extra):
    env = {k: v for k, v in os.environ.items() if k != tuning.ENV}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_round_trip_fake_file_next_process(tmp_path):
    top = _top_row()
    doc = _doc([{"op": "matmul", "dtype": "float32", "level": top.level, "mc": top.mr, "kc": 19,
                 "nc": top.nr}])
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    # the default location, found by the next process
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        path = tuning.default_path()
    _write(path, doc)
    got, err = _child(env)
    assert got["from"] == "tuning file" and got["blk"] == [top.mr, 19, top.nr] and got["ok"], (got, err)
    # ONEPATH_TUNING=off ignores it
    got, _ = _child({**env, tuning.ENV: "off"})
    assert got["from"] != "tuning file" and got["ok"]
    # a corrupt file: one warning on stderr, the shipped rows, the right answer
    path.write_text("{ truncated")
    got, err = _child(env)
    assert got["from"] != "tuning file" and got["ok"] and err.count("TuningWarning") == 1, err


def test_tune_writes_a_file_the_next_process_uses(tmp_path, monkeypatch):
    """``tune`` on tiny problems (the search itself, not its speed): the rows it writes parse and
    are picked up by the next process; existing rows of other ops are kept."""
    from onepath import tune
    monkeypatch.setattr(tune, "problems", lambda op, level, quick: [tune.Problem("gemm", (40, 70, 50))])
    monkeypatch.setattr(tune, "expected_candidates", lambda row, quick: 1)
    top = _top_row()
    out = tmp_path / "tuned.json"
    keep = {"op": "conv2d", "dtype": "float32", "level": top.level, "mc": top.mr, "kc": 33, "nc": top.nr}
    _write(out, _doc([keep]))
    import io
    buf = io.StringIO()
    monkeypatch.setattr(tune, "targets", lambda ops, dtypes: [
        r for r in registry.rows("matmul", "float32") if r.level == top.level and r.algorithm == "gemm"])
    report = tune.run(ops=["matmul"], dtypes=["float32"], threads=1, quick=True, out_path=str(out),
                      progress=False, out=buf, json_path=str(tmp_path / "report.json"),
                      choices=False)  # the blocking only (test_tuning_choices.py: the choices)
    assert "chosen" in buf.getvalue() and report["rows"] and report["rows"][0]["tried"]
    rows = tuning.read(out, probe())
    assert rows[(top.level, "conv2d", "float32")] == (top.mr, 33, top.nr)
    chosen = rows[(top.level, "matmul", "float32")]
    got, err = _child({tuning.ENV: str(out)})
    assert got["from"] == "tuning file" and got["ok"], err
    assert tuple(got["blk"]) == tuple(registry._fit(top, *chosen).values())
    assert json.loads((tmp_path / "report.json").read_text())["rows"][0]["level"] == top.level


def test_tune_cli_rejects_bad_arguments():
    from onepath.__main__ import main
    with pytest.raises(SystemExit):
        main(["tune", "--op", "fft"])
    with pytest.raises(SystemExit):
        main(["tune", "--threads", "0"])


def test_tune_does_not_time_blockings_that_run_identically():
    from onepath import tune
    row = registry.rows("matmul", "float32")[0]
    probs = [tune.Problem("gemm", (100, 200, 300))]
    assert tune._effective(row, probs, (row.mr * 8, 400, 1024)) == tune._effective(row, probs, (row.mr * 9, 512, 4096))
    assert tune._effective(row, probs, (row.mr, 64, row.nr)) != tune._effective(row, probs, (row.mr, 65, row.nr))
