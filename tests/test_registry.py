"""The registry as a whole: selection per op, dtype, level and (conv) problem."""
from __future__ import annotations

import pytest

import onepath
from onepath.dispatch import REGISTRY, rows, select
from onepath.dispatch.levels import LEVELS, level_index


def test_every_op_dtype_ends_in_generic():
    for op, dtype in {(r.op, r.dtype) for r in REGISTRY}:
        levels = [r.level for r in rows(op, dtype)]
        assert "generic" in levels, (op, dtype)


@pytest.mark.parametrize("op,dtype", sorted({(r.op, r.dtype) for r in REGISTRY}))
def test_select_never_above_the_forced_level(level, op, dtype):
    row = select(op, dtype)
    assert level_index(row.level) <= level_index(level)


@pytest.mark.parametrize("problem,algorithm", [
    (dict(c=32, oc=32, kh=3, kw=3, groups=32), "depthwise"),
    (dict(c=32, oc=64, kh=3, kw=3, groups=32), "depthwise"),
    (dict(c=64, oc=64, kh=1, kw=1, groups=1), "1x1_gemm"),
    (dict(c=64, oc=64, kh=3, kw=3, groups=4), "grouped"),
    (dict(c=64, oc=64, kh=3, kw=3, groups=1), "implicit_gemm"),
])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_select_names_the_conv_algorithm_of_a_problem(level, problem, algorithm, dtype):
    row = select("conv2d", dtype, problem=problem)
    assert row.algorithm == algorithm and level_index(row.level) <= level_index(level)


def test_problem_only_for_conv():
    with pytest.raises(ValueError, match="conv2d"):
        select("matmul", "float32", problem=dict(c=1, oc=1, kh=1, kw=1, groups=1))


def test_select_for_a_recorded_cpu_without_the_live_cap():
    from onepath.dispatch import CpuInfo
    cpu = onepath.dispatch.probe()
    assert select("matmul", "float32", cpu=cpu).level in cpu.levels
    assert isinstance(cpu, CpuInfo) and LEVELS[0] == "generic"
