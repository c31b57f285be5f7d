"""The cost of the reproducible mode (``python -m onepath bench --suite reproducible``): each row runs
one product in reproducible mode, alternated in the same process with the same product in the default
mode (the ``default`` baseline: float32 inputs, the default mode's fastest float32 kernel), so the
ratio column ``x default`` = default time / reproducible time (1.0: free; 0.77: 1.3x slower).
bfloat16 rows compare against the default mode's float32 time of the same shape (reproducible
bfloat16 computes in float32)."""
from __future__ import annotations

import numpy as np

import onepath

from ..dtypes import BF16
from .core import BenchConfig, Case, register_suite

SIZES = (512, 1024)


def _repro(fn):
    def run():
        with onepath.reproducible():
            return fn()
    return run


def repro_case(name: str, m: int, k: int, n: int, dtype, rng, group: str) -> Case:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    ar, br = (a.astype(BF16), b.astype(BF16)) if dtype == BF16 else (a, b)
    from dataclasses import replace

    from ..dispatch import select
    from ..ops._repro import kernel_name
    return Case(
        name=name, group=group, op="matmul", dtype="float32",
        kernel=replace(select("matmul", "float32"), name=kernel_name()),
        flops=2.0 * m * n * k, bytes=np.dtype(dtype).itemsize * (m * k + k * n + m * n),
        run=_repro(lambda: onepath.matmul(ar, br)),
        baselines={"default": lambda: onepath.matmul(a, b)},
        rtol=None, meta={"m": m, "k": k, "n": n, "dtype": np.dtype(dtype).name, "mode": "reproducible"},
    )


@register_suite("reproducible", title="reproducible mode vs default mode (float32 time)", default=False,
                order=90)
def repro_suite(cfg: BenchConfig):
    rng = cfg.rng()
    sizes = cfg.shapes or ((512,) if cfg.quick else SIZES)
    for s in sizes:
        yield repro_case(f"{s}x{s}x{s} f32", s, s, s, np.float32, rng, "float32")
    for s in sizes[:1]:
        yield repro_case(f"{s}x{s}x{s} bf16", s, s, s, BF16, rng, "bfloat16 (vs default float32)")
