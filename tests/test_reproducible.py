"""The reproducible mode (onepath.reproducible()): bit-identical results at every level and thread
count, the committed golden file, accuracy against float64, the mode switch, and its CLI."""
from __future__ import annotations

import json
import math
import pathlib
import threading

import numpy as np
import pytest

import onepath
from onepath import golden
from onepath.dtypes import BF16

from conftest import PKG_ROOT  # where the onepath under test lives

GOLDEN = pathlib.Path(__file__).parent / "golden" / "reproducible.json"
ACTS = (None, "relu", "gelu", "gelu_tanh", "silu")


def _bits(x) -> bytes:
    a = np.ascontiguousarray(x)
    return a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()


@pytest.fixture(autouse=True)
def _four_cpus(cpus):
    """Thread counts 1, 2 and 3 really run on a 2-CPU host (onepath caps threads at the CPUs)."""
    cpus(4)


def _every_level(fn, threads=(1, 2, 3)):
    """fn() at every level the host runs and each thread count, reproducible mode: the bits of each."""
    out = {}
    saved = onepath.get_num_threads()
    try:
        for lv in onepath.available_isas():
            for t in threads:
                onepath.set_num_threads(t)
                with onepath.max_isa(lv), onepath.reproducible():
                    out[(lv, t)] = _bits(fn())
    finally:
        onepath.set_num_threads(saved)
    return out


def test_golden_file_matches_at_every_level():
    """The committed golden file (written on an AMD Zen 4 host) at every level, threads 1, 2 and 3."""
    bad = golden.check(str(GOLDEN), threads=(1, 2, 3))
    assert not bad, "\n".join(f"{b['problem']} level {b['level']} threads {b['threads']}" for b in bad[:20])
    assert len(golden.read(str(GOLDEN))["problems"]) >= 200


def test_golden_problems_are_fixed():
    """The inputs come from integer arithmetic: the same values on every host and numpy version."""
    v = golden.values((4,), np.float32, 7)
    assert v.tobytes().hex() == golden.values((4,), np.float32, 7).tobytes().hex()
    names = [p.name for p in golden.problems()]
    assert len(names) == len(set(names)) >= 200
    sub = golden.values((4096,), BF16, 3).astype(np.float32)
    assert np.any((sub != 0) & (np.abs(sub) < np.finfo(np.float32).tiny))  # subnormals present


def test_bf16_subnormals_kept_at_every_level():
    """The issue's fault: every finite bfloat16 pattern times 1 returns itself at every level."""
    x = golden._all_bf16()
    outs = _every_level(lambda: onepath.matmul(x, np.ones((1, 1), BF16)), threads=(1,))
    assert len(set(outs.values())) == 1
    with onepath.reproducible():
        y = onepath.matmul(x, np.ones((1, 1), BF16))
    assert y.view(np.uint16).tobytes() == x.view(np.uint16).tobytes()


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_random_problems_identical_across_levels_and_threads(dt):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((67, 300)).astype(dt)
    b = rng.standard_normal((300, 150)).astype(dt)
    w = rng.standard_normal((90, 300)).astype(dt)
    bias = rng.standard_normal(90).astype(np.float32)
    x = rng.standard_normal((2, 20, 11, 11)).astype(dt)
    wc = rng.standard_normal((20, 5, 3, 3)).astype(dt)
    for fn in (lambda: onepath.matmul(a, b),
               lambda: onepath.linear(a, w, bias, activation="gelu_tanh"),
               lambda: onepath.conv2d(x, wc, None, stride=2, padding=1, groups=4, activation="relu")):
        outs = _every_level(fn)
        assert len(set(outs.values())) == 1, sorted(outs)


def test_large_problem_uses_threads():
    """The thread-count bar means something only if the kernels split the work."""
    from onepath.ops import _repro
    a = np.ones((256, 256), np.float32)
    c = np.empty((256, 256), np.float32)
    saved = onepath.get_num_threads()
    onepath.set_num_threads(3)
    try:
        assert _repro.gemm(a, a, c) > 1
    finally:
        onepath.set_num_threads(saved)
    assert np.all(c == 256)


@pytest.mark.parametrize("act", ACTS)
def test_linear_accuracy(act, level):
    from onepath.ops.linear import _act_numpy
    rng = np.random.default_rng(1)
    x = rng.standard_normal((9, 70)).astype(np.float32) * 2
    w = rng.standard_normal((33, 70)).astype(np.float32) * 0.3
    b = rng.standard_normal(33).astype(np.float32)
    with onepath.reproducible():
        y = onepath.linear(x, w, b, activation=act)
    ref = _act_numpy(x.astype(np.float64) @ w.T.astype(np.float64) + b, act)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5)


def test_activations_special_values():
    """One scalar code path: IEEE results at the extremes, as the default mode."""
    from onepath.ops._repro import _current
    bd = _current()
    xs = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -200.0, 200.0, 1e-30, -1e-30, 3.0, -3.0], np.float32)
    ref = {
        "relu": [np.nan, np.inf, 0, -0.0, 0, 0, 200, 1e-30, 0, 3, 0],
        "gelu": [np.nan, np.inf, np.nan, -0.0, 0, -0.0, 200, 5e-31, -5e-31, 2.9959502, -0.0040496940],
        "gelu_tanh": [np.nan, np.inf, np.nan, -0.0, 0, -0.0, 200, 5e-31, -5e-31, 2.9963626, -0.0036373921],
        "silu": [np.nan, np.inf, np.nan, -0.0, 0, -0.0, 200, 5e-31, -5e-31, 2.8577224, -0.1422776195],
    }
    from onepath.ops._gemm import act_code
    for act, want in ref.items():
        y = np.empty_like(xs)
        bd.lib.op_repro_act(xs.size, bd.ffi.cast("float *", xs.ctypes.data), bd.ffi.cast("float *", y.ctypes.data),
                            act_code(act))
        np.testing.assert_allclose(y, np.array(want, np.float32), rtol=1e-6, atol=1e-37, err_msg=act)
        assert np.array_equal(np.signbit(y[~np.isnan(y)]), np.signbit(np.array(want, np.float32)[~np.isnan(y)]))


def test_erfc_and_exp_accuracy():
    """The mode's own transcendental functions against math.erfc / math.exp (double precision)."""
    from onepath.ops._repro import _current
    from onepath.ops._gemm import act_code
    bd = _current()
    x = np.linspace(-14, 14, 4001).astype(np.float32)
    y = np.empty_like(x)
    bd.lib.op_repro_act(x.size, bd.ffi.cast("float *", x.ctypes.data), bd.ffi.cast("float *", y.ctypes.data),
                        act_code("gelu"))
    ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    assert np.all(np.abs(y - ref) <= 1.2e-7 * np.abs(ref) + 1e-44)  # one rounding to float32
    bd.lib.op_repro_act(x.size, bd.ffi.cast("float *", x.ctypes.data), bd.ffi.cast("float *", y.ctypes.data),
                        act_code("silu"))
    ref = np.array([v / (1 + math.exp(-v)) for v in x.astype(np.float64)])
    assert np.all(np.abs(y - ref) <= 1.2e-7 * np.abs(ref) + 1e-44)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups,oc,k", [(1, 6, 3), (1, 5, 1), (2, 4, 3), (4, 4, 3)])
def test_conv_accuracy(layout, groups, oc, k):
    from onepath.ops.conv import reference_conv2d
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((oc, 4 // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    ref = reference_conv2d(x.astype(np.float64), w.astype(np.float64), b, (2, 1), ((1, 2), (0, 1)), (1, 1),
                           groups, "silu")
    xi = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    with onepath.reproducible():
        y = onepath.conv2d(xi, w, b, stride=(2, 1), padding=((1, 2), (0, 1)), groups=groups, layout=layout,
                           activation="silu")
    if layout == "NHWC":
        y = y.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_conv1d_and_unbatched():
    x = np.arange(2 * 3 * 10, dtype=np.float32).reshape(2, 3, 10) / 7
    w = np.ones((4, 3, 3), np.float32)
    with onepath.reproducible():
        y = onepath.conv1d(x, w, padding=1)
        y2 = onepath.conv2d(x[0][:, None], w[:, :, None], padding=(0, 1))
    with onepath.reproducible(False):
        d = onepath.conv1d(x, w, padding=1)
    np.testing.assert_allclose(y, d, rtol=1e-6)
    assert y2.shape == (4, 1, 10)


def test_same_errors_and_numpy_dtypes_as_default_mode():
    a = np.ones((3, 4), np.float32)
    with onepath.reproducible():
        with pytest.raises(ValueError):
            onepath.matmul(a, np.ones((5, 2), np.float32))
        with pytest.raises(ValueError, match="in_features|features"):
            onepath.linear(a, np.ones((2, 5), np.float32))
        with pytest.raises(ValueError, match="activation"):
            onepath.linear(a, np.ones((2, 4), np.float32), activation="tanh")
        with pytest.raises(ValueError, match="groups"):
            onepath.conv2d(np.ones((1, 3, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32), groups=2)
        r = onepath.matmul(a.astype(np.float64), np.ones((4, 2)))
        assert r.dtype == np.float64 and np.all(r == 4)
        assert onepath.matmul(a, np.ones((4, 0), np.float32)).shape == (3, 0)
        z = onepath.linear(np.ones((2, 0), np.float32), np.ones((3, 0), np.float32), np.ones(3, np.float32),
                           activation="relu")
        assert np.array_equal(z, np.ones((2, 3), np.float32))
        out = np.empty((3, 2), BF16)
        assert onepath.matmul(a.astype(BF16), np.ones((4, 2), BF16), out=out) is out
        assert np.all(out.astype(np.float32) == 4)
        p = onepath.prepack(np.ones((2, 4), np.float32))
        assert np.all(onepath.matmul(a, p) == 4) and np.all(onepath.linear(a, p) == 4)


def test_mode_switch_scoped_per_thread():
    assert not onepath.is_reproducible()
    seen = {}
    gate = threading.Event()

    def other():
        gate.wait()
        seen["other"] = onepath.is_reproducible()

    t = threading.Thread(target=other)
    t.start()
    with onepath.reproducible():
        assert onepath.is_reproducible()
        with onepath.reproducible(False):
            assert not onepath.is_reproducible()
        assert onepath.is_reproducible()
        gate.set()
        t.join()
    assert seen == {"other": False}
    assert not onepath.is_reproducible()
    onepath.set_reproducible(True)
    try:
        assert onepath.is_reproducible()
        with onepath.reproducible(False):
            assert not onepath.is_reproducible()
    finally:
        onepath.set_reproducible(False)
    with pytest.raises(TypeError):
        onepath.set_reproducible(1)
    with pytest.raises(TypeError):
        onepath.reproducible("yes")
    onepath.set_reproducible(np.False_)  # numpy's bool is a bool
    with onepath.reproducible(np.True_):
        assert onepath.is_reproducible() is True


def test_threads_in_both_modes_at_once():
    """One shared reproducible() object used by several threads while others run the default mode."""
    rng = np.random.default_rng(9)
    # above the small kernel's limit (ops/_small.py), whose in-place chains can match the mode's bits
    a = rng.standard_normal((130, 700)).astype(np.float32)
    b = rng.standard_normal((700, 200)).astype(np.float32)
    scope = onepath.reproducible()
    with scope:
        want_r = onepath.matmul(a, b).tobytes()
    want_d = onepath.matmul(a, b).tobytes()
    errors = []

    def work(repro):
        for _ in range(15):
            if repro:
                with scope:
                    got = onepath.matmul(a, b).tobytes()
            else:
                got = onepath.matmul(a, b).tobytes()
            if got != (want_r if repro else want_d):
                errors.append(repro)

    ts = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert want_r != want_d  # the two modes really differ here (else the test shows nothing)


def test_env_parsing():
    from onepath._repro_mode import _parse_env
    assert _parse_env("1") and _parse_env("true") and not _parse_env("") and not _parse_env("0")
    with pytest.raises(ValueError, match="ONEPATH_REPRODUCIBLE"):
        _parse_env("maybe")


def test_env_variable_in_a_subprocess():
    import subprocess
    import sys
    code = ("import numpy as np, onepath; from onepath import info; "
            "print(onepath.is_reproducible(), info.collect(False)['reproducible']['source'])")
    env = dict(__import__("os").environ, ONEPATH_REPRODUCIBLE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=PKG_ROOT, check=True)
    assert r.stdout.split() == ["True", "ONEPATH_REPRODUCIBLE"]


def test_verbose_and_info_show_the_mode(verbose_on, caplog):
    from onepath import info
    with onepath.reproducible(), caplog.at_level("INFO", logger="onepath"):
        onepath.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
        text = info.render(info.collect(with_py_cpuinfo=False))
    assert "(reproducible)" in caplog.text
    assert "reproducible mode on" in text


def test_verbose_one_line_per_conv(verbose_on, caplog):
    """A reproducible-mode conv2d logs its own line only (its argument check runs the default
    conv on an empty batch, muted), with no comma inside a field's shapes."""
    with onepath.reproducible(), caplog.at_level("INFO", logger="onepath"):
        onepath.conv2d(np.ones((1, 2, 6, 6), np.float32), np.ones((5, 2, 3, 3), np.float32))
    assert len(caplog.messages) == 1, caplog.messages
    assert ",1x2x6x6*5x2x3x3,g1,nchw," in caplog.messages[0], caplog.messages[0]


def test_golden_cli_write_check_and_mismatch(tmp_path, capsys):
    from onepath.__main__ import main
    path = tmp_path / "g.json"
    doc = golden.write(str(path))
    doc["problems"] = doc["problems"][:3]
    doc["problems"][1]["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    assert main(["golden", "--check", str(path), "--levels", "generic", "--threads", "1"]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCH {doc['problems'][1]['name']}: level generic threads 1" in out
    assert main(["golden", "--check", str(path), "--levels", "nope"]) == 2
    (tmp_path / "bad.json").write_text("{}")
    assert main(["golden", "--check", str(tmp_path / "bad.json")]) == 2
    doc["problems"][0] = {"name": doc["problems"][0]["name"]}  # an entry without its sha256
    path.write_text(json.dumps(doc))
    assert main(["golden", "--check", str(path)]) == 2
    assert "problems[0]" in capsys.readouterr().err


def test_golden_problems_agree_with_the_default_mode():
    """Every golden problem in reproducible mode is the default mode's answer up to rounding."""
    bad = []
    for p in golden.problems():
        with onepath.reproducible():
            r = p.run()
        d = p.run()
        assert r.shape == d.shape and r.dtype == d.dtype, p.name
        r64, d64 = np.asarray(r, np.float64), np.asarray(d, np.float64)
        fin = np.isfinite(d64)
        assert np.array_equal(fin, np.isfinite(r64)), p.name
        assert np.array_equal(np.isnan(d64), np.isnan(r64)), p.name
        r64, d64 = r64[fin], d64[fin]
        scale = float(np.max(np.abs(d64))) if d64.size else 0.0
        err = float(np.max(np.abs(r64 - d64))) if d64.size else 0.0
        tol = (1e-2 if r.dtype == BF16 else 1e-5) * scale + 1e-30
        if not err <= tol:
            bad.append((p.name, err, scale))
    assert not bad, bad[:10]


def test_bench_reproducible_flag_and_suite(tmp_path, capsys):
    from onepath.__main__ import main
    out = tmp_path / "r.json"
    assert main(["bench", "--reproducible", "--suite", "reproducible", "--shapes", "32", "--repeat", "3",
                 "--min-time", "0.001", "--no-peak", "--threads", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["fingerprint"]["reproducible"] is True and not onepath.is_reproducible()
    names = [r["name"] for r in doc["results"]]
    assert names == ["32x32x32 f32", "32x32x32 bf16"]
    assert all(r["ratios"]["default"] > 0 and len(r["impls"]["onepath"]["samples"]) == 3 for r in doc["results"])
    assert "reproducible mode" in capsys.readouterr().out


def test_flush_to_zero_in_the_caller_changes_nothing():
    """A caller running with FTZ/DAZ set (as some libraries leave it) gets the same bits, and its
    MXCSR back afterwards (glibc x86-64: fenv_t holds MXCSR at byte 28)."""
    import ctypes
    import ctypes.util
    import platform
    import struct
    name = ctypes.util.find_library("m")
    if platform.machine() != "x86_64" or name is None or platform.libc_ver()[0] != "glibc":
        pytest.skip("needs glibc on x86-64")
    libm = ctypes.CDLL(name)
    env = ctypes.create_string_buffer(32)
    assert libm.fegetenv(env) == 0
    saved = ctypes.create_string_buffer(env.raw, 32)
    struct.pack_into("<I", env, 28, struct.unpack_from("<I", env.raw, 28)[0] | 0x8040)  # FTZ | DAZ
    x = golden._all_bf16()
    a, b = golden.values((30, 200), np.float32, 1), golden.values((40, 200), np.float32, 2)
    with onepath.reproducible():
        want = onepath.linear(a, b, activation="gelu").tobytes()
    tiny, f = np.array([1e-38], np.float32), np.array([0.01], np.float32)
    try:
        libm.fesetenv(env)
        assert (tiny * f)[0] == 0  # FTZ is on in this thread
        with onepath.reproducible():
            y = onepath.matmul(x, np.ones((1, 1), BF16))
            got = onepath.linear(a, b, activation="gelu").tobytes()
        assert (tiny * f)[0] == 0  # and still on: the caller's MXCSR was restored
    finally:
        libm.fesetenv(saved)
    assert (tiny * f)[0] != 0
    assert y.view(np.uint16).tobytes() == x.view(np.uint16).tobytes()
    assert got == want


def test_golden_check_reports_problems_missing_from_the_file(tmp_path):
    """A cut-down golden file checks nothing: the problems it lacks are reported."""
    doc = json.loads(GOLDEN.read_text())
    doc["problems"] = doc["problems"][:3]
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(doc))
    bad = golden.check(str(cut), levels=["generic"], threads=[1])
    assert len(bad) == len(golden.problems()) - 3
    assert all(b["expected"] is None and b["got"] == "missing" for b in bad)


def test_prepacked_weight_same_bits_as_raw(level):
    """Reproducible mode gives a prepacked weight the raw weight's bits (the default mode may sum
    in another order: onepath.prepack's docstring), bfloat16 with K above a KC block and float32
    products of 1-4 rows among them."""
    rng = np.random.default_rng(0)
    for dt, m, k, n in ((BF16, 13, 300, 16), (np.float32, 1, 1025, 640), (BF16, 3, 64, 96)):
        x = rng.standard_normal((m, k)).astype(dt)
        w = rng.standard_normal((n, k)).astype(dt)
        with onepath.max_isa(level), onepath.reproducible():
            raw = np.asarray(onepath.linear(x, w, dtype=np.float32))
            packed = np.asarray(onepath.linear(x, onepath.prepack(w), dtype=np.float32))
        assert np.array_equal(raw.view(np.uint32), packed.view(np.uint32)), (dt, m, k, n)
