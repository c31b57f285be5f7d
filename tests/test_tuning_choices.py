"""The tuning file's choices (schema 2, onepath/dispatch/tuning.py): the conv formulation
(``conv_as_nhwc``) and the kernel level (``kernel_level``, e.g. the 256-bit avx2 GEMM at an
AVX-512 level). Parsing, precedence, ``info``, the round trip into the next process, ``tune``'s
search on tiny problems, and every choice a file can make run against the references at every
level this host can run. No test asserts a speed."""
from __future__ import annotations

import copy
import io
import json

import numpy as np
import pytest
from ml_dtypes import bfloat16

import onepath
from onepath.dispatch import LEVELS, probe, registry, select, tuning
from onepath.dispatch.levels import level_index
from onepath.ops import conv as _conv

from test_conv import run_case
from test_tuning import _child, _doc, _write, clean  # noqa: F401  (clean: a fixture)

TOP = probe().isa
NEVER = {c: 0 for c in tuning.CONV_CLASSES}
ALWAYS = {c: tuning.CONV_PIXELS_MAX for c in tuning.CONV_CLASSES}


def _conv_level(level=TOP, dtype="float32"):
    return _conv.select_conv("implicit_gemm", dtype, level=level).level


def _with_choices(choices, rows=None, schema=None):
    doc = _doc(rows)
    doc["choices"] = choices
    if schema is not None:
        doc["schema"] = schema
    return doc


# ---- parsing ----

def test_parse_choices():
    lv = _conv_level()
    doc = _with_choices([
        {"op": "conv2d", "dtype": "float32", "level": lv, "conv_as_nhwc": {"kxk": 49},
         "detail": {"anything": [1, 2]}},
        {"op": "matmul", "dtype": "float32", "level": "avx2", "kernel_level": "generic"}])
    rows, choices = tuning.parse_all(doc, probe())
    assert rows == tuning.parse(doc, probe()) and len(rows) == 1
    assert choices == {(lv, "conv2d", "float32"): {"conv_as_nhwc": {"kxk": 49}},
                       ("avx2", "matmul", "float32"): {"kernel_level": "generic"}}


def test_schema_1_file_is_read_as_blocking_rows():
    doc = _doc()
    doc["schema"] = 1
    rows, choices = tuning.parse_all(doc, probe())
    assert rows and choices == {}
    doc["choices"] = []
    with pytest.raises(tuning.TuningError, match="schema-1"):
        tuning.parse_all(doc, probe())


_C = {"op": "conv2d", "dtype": "float32", "level": "avx2", "conv_as_nhwc": {"kxk": 196}}
_K = {"op": "linear", "dtype": "float32", "level": "avx2", "kernel_level": "generic"}
_T = {"op": "matmul", "dtype": "float32", "level": "avx2", "thin_f32": ["ksplit"]}


@pytest.mark.parametrize("choice,match", [
    ({**_C, "op": "matmul"}, "applies to op 'conv2d'"),
    ({**_C, "conv_as_nhwc": {"3x3": 196}}, "conv_as_nhwc must map"),
    ({**_C, "conv_as_nhwc": {}}, "conv_as_nhwc must map"),
    ({**_C, "conv_as_nhwc": [196]}, "conv_as_nhwc must map"),
    ({**_C, "conv_as_nhwc": {"kxk": -1}}, "outside"),
    ({**_C, "conv_as_nhwc": {"kxk": True}}, "integer"),
    ({**_C, "conv_as_nhwc": {"kxk": 1 << 40}}, "outside"),
    ({**_K, "kernel_level": "avx1024"}, "no ISA level"),
    ({**_K, "kernel_level": 3}, "no ISA level"),
    ({**_K, "kernel_level": "avx512_core"}, "above the row's level"),
    ({**_K, "level": "avx512_core_bf16"}, "no registry kernel"),   # no float32 row at that level
    ({"op": "matmul", "dtype": "float32", "level": "avx2"}, "names none"),
    ({**_K, "ukr": "6x16"}, "unknown keys"),
    ({**_T, "op": "linear"}, "thin_f32 applies to op 'matmul'"),
    ({**_T, "thin_f32": ["prefetch_all"]}, "thin_f32 must list"),
    ({**_T, "thin_f32": ["ksplit", "ksplit"]}, "thin_f32 must list"),
    ({**_T, "thin_f32": "ksplit"}, "thin_f32 must list"),
    ("avx2", "not an object"),
])
def test_parse_rejects_bad_choices(choice, match):
    with pytest.raises(tuning.TuningError, match=match):
        tuning.parse_all(_with_choices([choice]), probe())


def test_parse_rejects_second_choice_and_non_list():
    with pytest.raises(tuning.TuningError, match="second choice"):
        tuning.parse_all(_with_choices([_C, copy.deepcopy(_C)]), probe())
    with pytest.raises(tuning.TuningError, match="choices must be a list"):
        tuning.parse_all(_with_choices({"a": 1}), probe())


def test_bad_choice_ignores_the_file_with_one_warning(clean, tmp_path):
    shipped = select("matmul", "float32")
    path = _write(tmp_path / "t.json", _with_choices([{**_K, "kernel_level": "avx1024"}]))
    clean.setenv(tuning.ENV, str(path))
    with pytest.warns(tuning.TuningWarning, match="no ISA level"):
        tuning.reload()
    assert tuning.choices() == {} and tuning.rows() == {}
    assert select("matmul", "float32") == shipped


# ---- precedence: shipped < tuning file < explicit ONEPATH_TUNING; off ----

def test_conv_as_nhwc_precedence(clean, tmp_path):
    lv = _conv_level()
    clean.setitem(registry.CONV_NCHW_AS_NHWC, (probe().uarch, lv), {"kxk": 49, "1x1_stride": 784})
    assert registry.conv_as_nhwc_limits(lv, "float32") == ({"kxk": 49, "1x1_stride": 784}, "shipped")
    _write(tuning.default_path(), _with_choices(
        [{"op": "conv2d", "dtype": "float32", "level": lv, "conv_as_nhwc": {"kxk": 196, "1x1_batch": 0}}]))
    tuning.reload()
    # the classes the file names win, the others stay shipped; another dtype keeps the shipped rule
    assert registry.conv_as_nhwc_limits(lv, "float32") == (
        {"kxk": 196, "1x1_batch": 0, "1x1_stride": 784}, "tuning file")
    assert registry.conv_as_nhwc_limits(lv, "bfloat16")[1] == "shipped"
    # another CPU (an explicit uarch) never takes the host's file
    assert registry.conv_as_nhwc_limits(lv, "float32", uarch=probe().uarch)[1] == "shipped"
    explicit = _write(tmp_path / "mine.json", _with_choices(
        [{"op": "conv2d", "dtype": "float32", "level": lv, "conv_as_nhwc": {"kxk": 0}}]))
    clean.setenv(tuning.ENV, str(explicit))
    tuning.reload()
    assert registry.conv_as_nhwc_limits(lv, "float32")[0]["kxk"] == 0
    clean.setenv(tuning.ENV, "off")
    tuning.reload()
    assert registry.conv_as_nhwc_limits(lv, "float32") == ({"kxk": 49, "1x1_stride": 784}, "shipped")


def test_kernel_level_choice_and_info(clean, tmp_path):
    if level_index(TOP) < level_index("avx2"):
        pytest.skip("needs a level above generic")
    top = select("matmul", "float32")
    path = _write(tmp_path / "t.json", _with_choices(
        [{"op": "matmul", "dtype": "float32", "level": top.level, "kernel_level": "generic"},
         {"op": "conv2d", "dtype": "float32", "level": _conv_level(), "conv_as_nhwc": {"kxk": 7}}]))
    clean.setenv(tuning.ENV, str(path))
    tuning.reload()
    row = select("matmul", "float32")
    assert (row.level, row.kernel_from, row.algorithm) == ("generic", "tuning file", "gemm")
    assert select("linear", "float32").level == top.level          # only the (op, dtype) named
    from onepath import info
    report = info.collect(with_py_cpuinfo=False)
    assert report["tuning"]["choices"] == 2
    sel = next(k for k in report["kernels"] if (k["op"], k["dtype"], k["selected"]) == ("matmul", "float32", True))
    assert sel["level"] == "generic" and sel["kernel_from"] == "tuning file"
    conv = {(c["level"], c["dtype"]): c for c in report["choices"] if c["choice"] == "conv_as_nhwc"}
    assert conv[(_conv_level(), "float32")]["from"] == "tuning file"
    assert conv[(_conv_level(), "float32")]["value"]["kxk"] == 7
    text = info.render(report)
    assert "NHWC formulation" in text and "Kernel level choices" in text
    assert any(line.split()[:4] == ["matmul", "float32", top.level, "generic"] for line in text.splitlines())


def test_thin_f32_choice_sets_the_module_and_info(clean, tmp_path):
    """A file's thin_f32 options replace the shipped GEMV_F32_OPTIONS row of that level's module
    (module-wide C state, set again when the file changes); off gives the shipped row back. Each
    option set's results are tested in test_row_stream.py."""
    if level_index(TOP) < level_index("avx2"):
        pytest.skip("needs a level above generic")
    from onepath import info
    from onepath.kernels import load
    lv = select("matmul", "float32").level
    lib = load(lv).lib
    shipped = registry.gemv_f32_flags(lv, uarch=probe().uarch)
    for opts in (["ksplit"], []):
        _write(tuning.default_path(), _with_choices([{**_T, "level": lv, "thin_f32": opts}]))
        tuning.reload()
        assert registry.gemv_f32_options(lv) == (tuple(opts), "tuning file")
        assert lib.op_gemv_f32_options(-1) == sum(registry.GEMV_F32_FLAGS[o] for o in opts)
        a, w = np.ones((3, 700), np.float32), np.ones((700, 300), np.float32)
        assert np.array_equal(onepath.matmul(a, w), np.full((3, 300), 700, np.float32))
    report = info.collect(with_py_cpuinfo=False)
    got = [c for c in report["choices"] if c["choice"] == "thin_f32"]
    assert got == [{"choice": "thin_f32", "op": "matmul", "dtype": "float32", "level": lv,
                    "value": "none", "from": "tuning file"}]
    assert "Thin float32 product options" in info.render(report)
    clean.setenv(tuning.ENV, "off")
    tuning.reload()
    assert lib.op_gemv_f32_options(-1) == shipped
    assert registry.gemv_f32_options(lv)[1] in ("shipped", "none")


# ---- every choice a file can make computes the right answer, at every level ----

CONV_CASES = [
    (2, 6, 9, 11, 5, 3, 3, 1, 1, 1),       # 3x3 with a batch, ragged channels
    (2, 24, 7, 7, 40, 1, 1, 1, 0, 1),      # 1x1 with a batch
    (1, 16, 9, 8, 8, 1, 1, 2, 1, 1),       # strided 1x1 with padding
]


@pytest.mark.parametrize("limits", [ALWAYS, NEVER], ids=["always", "never"])
def test_conv_as_nhwc_choice_every_level(level, clean, limits):
    """A file's conv_as_nhwc (all classes always / never) reaches the kernel as op_conv_desc.nhwc
    = 2 / 0 at this level, whatever the shipped rule says, and the results match the reference."""
    clean.setattr(registry, "CONV_NCHW_AS_NHWC",
                  {(probe().uarch, lv): (NEVER if limits is ALWAYS else ALWAYS) for lv in LEVELS})
    choices = {(lv, "conv2d", dt): {"conv_as_nhwc": limits} for lv in LEVELS for dt in ("float32", "bfloat16")}
    with tuning.override({}, choices):
        for dtype in (np.float32, bfloat16):
            for case in CONV_CASES:
                _conv._PLANS.clear()
                n, c, h, w, oc, kh, kw, s, p, d = case
                run_case(n, c, h, w, oc, kh, kw, s, p, d, 1, bias=True, activation="relu", dtype=dtype)
                # (NCHW 1x1 float32 at batch >= 2 runs the joint GEMM where the host's option has it:
                # op_conv2d_f32_joint replaces the NHWC formulation, whatever the limits)
                plans = list(_conv._PLANS.values())
                assert plans and all(pl.desc.nhwc == (2 if limits is ALWAYS else 0) for pl in plans
                                     if not pl.text.endswith(",joint"))


def _lower_levels(level):
    return [lv for lv in onepath.available_isas() if level_index(lv) < level_index(level)]


def test_kernel_level_choice_every_level(level, clean):
    """At the level in force, a file may send each (op, dtype)'s GEMM-based kernel to any lower
    level: the row dispatch then runs is that level's, and matmul, linear, prepacked linear and
    conv2d match their references."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((37, 53)).astype(np.float32)
    b = rng.standard_normal((53, 70)).astype(np.float32)
    x = rng.standard_normal((2, 5, 9, 8)).astype(np.float32)
    w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    ref_mm = a.astype(np.float64) @ b
    ref_cv = _conv.reference_conv2d(x, w, None, (1, 1), ((1, 1), (1, 1)))
    for kl in _lower_levels(level):
        choices = {}
        before = {}
        for op in ("matmul", "linear", "conv2d"):
            for dt in ("float32", "bfloat16"):
                lv = before[op, dt] = select(op, dt).level
                if level_index(kl) < level_index(lv):
                    choices[(lv, op, dt)] = {"kernel_level": kl}
        with tuning.override({}, choices):
            for (op, dt), lv in before.items():
                row = select(op, dt)
                want = (kl, "tuning file") if (lv, op, dt) in choices else (lv, "")
                assert (row.level, row.kernel_from) == want, (op, dt, row)
                if op == "conv2d":
                    assert _conv.select_conv("1x1_gemm", dt).level == want[0]
            for dt, tol in ((np.float32, 1e-4), (bfloat16, 3e-2)):
                aa, bb = a.astype(dt), b.astype(dt)
                r = aa.astype(np.float64) @ bb.astype(np.float64)
                got = onepath.matmul(aa, bb).astype(np.float64)
                np.testing.assert_allclose(got, r, rtol=tol, atol=tol * np.abs(r).max())
                wt = np.ascontiguousarray(bb.T)
                got = onepath.linear(aa, wt).astype(np.float64)
                np.testing.assert_allclose(got, r, rtol=tol, atol=tol * np.abs(r).max())
                got = onepath.linear(aa, onepath.prepack(wt)).astype(np.float64)
                np.testing.assert_allclose(got, r, rtol=tol, atol=tol * np.abs(r).max())
                rc = _conv.reference_conv2d(x.astype(dt), w.astype(dt), None, (1, 1), ((1, 1), (1, 1)))
                got = onepath.conv2d(x.astype(dt), w.astype(dt), padding=1).astype(np.float64)
                np.testing.assert_allclose(got, rc, rtol=tol, atol=tol * np.abs(rc).max())
            np.testing.assert_allclose(onepath.matmul(a, b), ref_mm, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(onepath.conv2d(x, w, padding=1), ref_cv, rtol=1e-4, atol=1e-4)


# ---- round trip: the choices of a file written here are used by the next process ----

_CHILD = """
import json, numpy as np, onepath
from onepath.dispatch import registry, select, tuning
from onepath.ops import conv
r = select("matmul", "float32")
x = np.ones((1, 8, 7, 7), np.float32); w = np.ones((4, 8, 3, 3), np.float32)
y = onepath.conv2d(x, w, padding=1)
nhwc = [pl.desc.nhwc for pl in conv._PLANS.values()]
a = np.arange(60 * 50, dtype=np.float32).reshape(60, 50) % 7
b = np.arange(50 * 70, dtype=np.float32).reshape(50, 70) % 5
ok = bool(np.array_equal(onepath.matmul(a, b), (a.astype(np.float64) @ b).astype(np.float32)))
ok = ok and float(y[0, 0, 3, 3]) == 72.0
print(json.dumps({"level": r.level, "kernel_from": r.kernel_from, "nhwc": nhwc, "ok": ok,
                  "state": tuning.state().as_dict()}))
"""


def test_round_trip_choices_next_process(tmp_path, monkeypatch):
    if level_index(TOP) < level_index("avx2"):
        pytest.skip("needs a level above generic")
    import test_tuning
    monkeypatch.setattr(test_tuning, "_CHILD", _CHILD)
    top = select("matmul", "float32")
    lv = _conv_level()
    path = _write(tmp_path / "t.json", _with_choices(
        [{"op": "matmul", "dtype": "float32", "level": top.level, "kernel_level": "generic"},
         {"op": "conv2d", "dtype": "float32", "level": lv, "conv_as_nhwc": ALWAYS}]))
    got, err = _child({tuning.ENV: str(path)})
    assert got["ok"] and got["level"] == "generic" and got["kernel_from"] == "tuning file", (got, err)
    assert got["nhwc"] == [2] and got["state"]["choices"] == 2
    doc = json.loads(path.read_text())
    doc["choices"][1]["conv_as_nhwc"] = NEVER
    _write(path, doc)
    got, err = _child({tuning.ENV: str(path)})
    assert got["ok"] and got["nhwc"] == [0], (got, err)
    got, err = _child({tuning.ENV: "off"})
    assert got["ok"] and got["level"] == top.level and got["kernel_from"] == ""


# ---- tune's choice search (on tiny problems: the logic, not the speed) ----

def test_as_nhwc_threshold():
    from onepath.tune import as_nhwc_threshold
    planes = [49, 196, 784, 3136]
    nchw = [1.0, 1.0, 1.0, 1.0]
    assert as_nhwc_threshold(planes, nchw, [0.8, 0.9, 1.1, 1.3], 0) == 196
    assert as_nhwc_threshold(planes, nchw, [0.8, 0.9, 0.95, 0.9], 49) == 3136
    assert as_nhwc_threshold(planes, nchw, [1.2, 1.1, 1.1, 1.3], 196) == 0
    assert as_nhwc_threshold(planes, nchw, [0.995, 1.0, 1.1, 1.3], 0) == 0        # within the margin
    assert as_nhwc_threshold(planes, nchw, [0.995, 1.0, 1.1, 1.3], 49) == 49      # the shipped rule stays
    assert as_nhwc_threshold(planes, nchw, [float("inf"), 0.5, 1.1, 1.3], 196) == 0  # a wrong result
    assert as_nhwc_threshold(planes, nchw, [0.8, 1.0, 1.1, 1.3], 0) == 49           # tie at 196: less change
    assert as_nhwc_threshold(planes, nchw, [0.8, 1.0, 1.1, 1.3], 784) == 196


def test_tune_measures_and_writes_choices(tmp_path, monkeypatch):
    from onepath import tune
    top = select("matmul", "float32")
    monkeypatch.setattr(tune, "problems", lambda op, level, quick: (
        [tune.Problem("gemm", (40, 70, 50))] if op != "conv2d" else [tune.Problem("conv", (8, 9, 12, 3))]))
    monkeypatch.setattr(tune, "expected_candidates", lambda row, quick: 1)
    monkeypatch.setattr(tune, "THIN_KN", 96)
    monkeypatch.setattr(tune, "CONV_CLASS_PROBLEMS", {
        "kxk": ((8, 14, 12, 3, 1, 2),), "kxk_stride1": ((8, 7, 12, 3, 1, 1), (8, 14, 12, 3, 1, 1)),
        "1x1_batch": ((16, 7, 8, 1, 2, 1),),
        "1x1_stride": ((16, 9, 8, 1, 1, 2),), "1x1_single": ((16, 7, 8, 1, 1, 1),)})
    conv_row = _conv.select_conv("implicit_gemm", "float32", level=TOP)
    raw = [r for r in registry.REGISTRY if (r.level, r.op, r.dtype, r.algorithm)
           in {(top.level, "matmul", "float32", "gemm"), (conv_row.level, "conv2d", "float32", "implicit_gemm")}]
    monkeypatch.setattr(tune, "targets", lambda ops, dtypes: raw)
    monkeypatch.setattr(tune, "tune_row", lambda row, *a, **k: tune.RowResult(
        row.op, row.dtype, row.level, row.name, (row.mr, 64, row.nr), "cache model", 1.0,
        (row.mr, 64, row.nr), 1.0, None, []))
    out = tmp_path / "tuned.json"
    old = _with_choices([{"op": "conv2d", "dtype": "bfloat16", "level": "generic", "conv_as_nhwc": {"kxk": 5}}])
    _write(out, old)
    buf = io.StringIO()
    report = tune.run(ops=["matmul", "conv2d"], dtypes=["float32"], threads=1, quick=True,
                      out_path=str(out), progress=False, out=buf)
    assert "NHWC form kxk" in buf.getvalue()
    kinds = {(c["level"], c["op"], c["kind"]) for c in report["choices"]}
    assert (conv_row.level, "conv2d", "conv_as_nhwc") in kinds
    if level_index(top.level) >= level_index("avx512_core"):
        assert (top.level, "matmul", "kernel_level") in kinds
    if top.level != "generic":
        assert (top.level, "matmul", "thin_f32") in kinds and "thin options" in buf.getvalue()
        assert set(tuning.read_all(out, probe())[1][(top.level, "matmul", "float32")]) >= {"thin_f32"}
        from onepath.kernels import load
        assert load(top.level).lib.op_gemv_f32_options(-1) == registry.gemv_f32_flags(top.level)
    assert not any(c["rejected"] for c in report["choices"])
    rows, choices = tuning.read_all(out, probe())
    assert set(choices[(conv_row.level, "conv2d", "float32")]["conv_as_nhwc"]) == set(tuning.CONV_CLASSES)
    assert choices[("generic", "conv2d", "bfloat16")] == {"conv_as_nhwc": {"kxk": 5}}   # kept
