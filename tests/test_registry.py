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


def test_select_with_an_explicit_cpu_and_level():
    """select(cpu=..., level=...) answers for that CPU, not for the live cap; a level the CPU cannot
    run is an error naming the valid ones."""
    cpu = onepath.dispatch.probe()
    for lv in cpu.levels:
        row = select("matmul", "float32", cpu=cpu, level=lv)
        assert level_index(row.level) <= level_index(lv)
    with onepath.max_isa("generic"):  # the live cap does not leak into an explicit-cpu query
        assert select("matmul", "float32", cpu=cpu).level == rows("matmul", "float32")[
            [level_index(r.level) <= level_index(cpu.isa) for r in rows("matmul", "float32")].index(True)].level
    above = [lv for lv in LEVELS if lv not in cpu.levels]
    if above:
        with pytest.raises(ValueError, match="generic"):
            select("matmul", "float32", cpu=cpu, level=above[0])


def test_prepacked_row_nc():
    """registry.prepacked_row: a shipped linear row of a (uarch, level, dtype) in PREPACKED_NC runs
    a prepacked weight with that NC; a tuning file's row, another uarch's row and a row without an
    entry are kept as they are."""
    from dataclasses import replace
    from onepath.dispatch import registry
    (key, nc), = [(k, v) for k, v in registry.PREPACKED_NC.items()][:1]
    uarch, level, dtype = key
    row = next(r for r in registry._LINEAR if r.level == level and r.dtype == dtype)
    shipped = replace(row, mc=96, kc=1024, nc=384, uarch=uarch, blocking_from="shipped")
    assert registry.prepacked_row(shipped).nc == nc
    assert registry.prepacked_row(shipped).mc == 96 and registry.prepacked_row(shipped).kc == 1024
    for kept in (replace(shipped, blocking_from="tuning file"), replace(shipped, uarch="zen4"),
                 replace(shipped, blocking_from="cache model", uarch=None)):
        assert registry.prepacked_row(kept) == kept
