"""The vendor-neutral benchmark (``python -m onepath bench``).

Adding a suite: create ``onepath/bench/<anything>_suite.py`` (modules ending in ``_suite`` are
discovered automatically) and register a generator of cases::

    from onepath.bench.core import BenchConfig, Case, register_suite

    @register_suite("matmul_bf16", title="bfloat16 matmul", order=20)
    def bf16_suite(cfg: BenchConfig):
        for s in ((256, 512) if cfg.quick else (256, 512, 1024, 2048)):
            a, b = ...
            yield Case(name=f"{s}x{s}x{s}", group="square", flops=2.0 * s**3, bytes=2.0 * 3 * s * s,
                       run=lambda a=a, b=b: onepath.matmul(a, b),
                       baselines={"numpy": ..., "torch": ...},
                       op="matmul", dtype="bfloat16", rtol=1e-2)

Each case is timed alternately with its baselines (see ``core.measure_case``); the first baseline
is the reference for the correctness check (``rtol``) and every baseline gets a ratio column.
"""
from .core import BenchConfig, Case, register_suite

__all__ = ["BenchConfig", "Case", "register_suite"]
