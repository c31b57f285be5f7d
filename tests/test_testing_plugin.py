"""The onepath.testing pytest plugin, run with pytester on the example suite of examples/pytest_plugin."""
from __future__ import annotations

import json
import pathlib

import pytest

import onepath
from onepath.dispatch import LEVELS

EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "pytest_plugin" / "test_example.py"


@pytest.fixture
def example(pytester):
    pytester.makepyfile(test_example=EXAMPLE.read_text())
    return pytester


def test_every_level_and_coverage_report(example):
    r = example.runpytest("-p", "onepath.testing", "--onepath-isa=all", "--benchmark-disable",
                          "-k", "not benchmark", "-p", "no:cacheprovider")
    runnable = len(onepath.available_isas())
    r.assert_outcomes(passed=2 * runnable, skipped=2 * (len(LEVELS) - runnable))
    r.stdout.fnmatch_lines(["*onepath kernel coverage*", "*host: *levels:*",
                            "*matmul*float32*generic*exercised*"])
    for lv in onepath.available_isas():
        r.stdout.no_fnmatch_line(f"*test_matmul_every_level?{lv}? SKIPPED*")


def test_level_list_and_usage_error(example):
    r = example.runpytest("-p", "onepath.testing", "--onepath-isa=generic,AVX2", "-v", "--benchmark-disable",
                          "-k", "not benchmark", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=4)
    r.stdout.fnmatch_lines(["*test_matmul_every_level?generic? PASSED*", "*test_matmul_every_level?avx2? PASSED*"])
    bad = example.runpytest("-p", "onepath.testing", "--onepath-isa=sse9", "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--onepath-isa*unknown ISA level*sse9*"])


def test_benchmark_json_carries_the_fingerprint_and_no_report_unless_asked(example, tmp_path):
    out = tmp_path / "bench.json"
    r = example.runpytest("-p", "onepath.testing", "-k", "benchmark", f"--benchmark-json={out}",
                          "--benchmark-max-time=0.01", "--benchmark-min-rounds=1", "--benchmark-warmup=off",
                          "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    assert "onepath kernel coverage" not in r.stdout.str()
    fp = json.loads(out.read_text())["machine_info"]["onepath"]
    assert fp["vendor"] and fp["uarch"] and fp["level"] == onepath.isa()
    assert set(fp) >= {"vendor", "brand", "uarch", "family", "model", "level", "features", "caches"}
