"""float32 matmul rows of ``python -m onepath bench``: squares, BERT-base layers, and the thin products
of LLM decode (M = 1, 4, 16 with K = N = 4096) with the weight both row-major (``x @ W``) and
transposed (``x @ W.T``, a torch.nn.Linear weight), the two layouts issue 8's bars name."""
from __future__ import annotations

import numpy as np

import onepath

from .core import BenchConfig, Case, aligned, register_suite

SQUARES = (64, 128, 256, 512, 1024, 2048)
QUICK_SQUARES = (64, 256, 1024)
BERT = ((768, 768), (768, 3072), (3072, 768))  # K -> N of the attention/FFN projections
BERT_TOKENS = (128, 512)
DECODE_M = (1, 4, 16)
DECODE_KN = 4096


def matmul_case(name: str, m: int, k: int, n: int, cfg: BenchConfig, group: str = "",
                rng: np.random.Generator | None = None, b_transposed: bool = False) -> Case:
    """A float32 (M x K) @ (K x N) case: onepath.matmul vs numpy.matmul, both into a preallocated out.
    b_transposed: B is the transposed view ``W.T`` of a row-major W (N, K) instead of a row-major
    (K, N) array."""
    rng = rng or cfg.rng()
    a = aligned(rng.standard_normal((m, k), dtype=np.float32))
    b = (aligned(rng.standard_normal((n, k), dtype=np.float32)).T if b_transposed
         else aligned(rng.standard_normal((k, n), dtype=np.float32)))
    c1 = aligned(np.empty((m, n), np.float32))
    c2 = aligned(np.empty((m, n), np.float32))
    return Case(
        name=name, group=group, op="matmul", dtype="float32",
        flops=2.0 * m * n * k, bytes=4.0 * (m * k + k * n + m * n),
        run=lambda: onepath.matmul(a, b, out=c1),
        baselines={"numpy": lambda: np.matmul(a, b, out=c2)},
        rtol=1e-4, meta={"m": m, "k": k, "n": n},
    )


@register_suite("matmul", title="float32 matmul", order=10)
def matmul_suite(cfg: BenchConfig):
    rng = cfg.rng()
    if cfg.shapes:  # explicit sizes (tests, quick looks): squares only
        for s in cfg.shapes:
            yield matmul_case(f"{s}x{s}x{s}", s, s, s, cfg, "square", rng)
        return
    for s in (QUICK_SQUARES if cfg.quick else SQUARES):
        yield matmul_case(f"{s}x{s}x{s}", s, s, s, cfg, "square", rng)
    tokens = BERT_TOKENS[:1] if cfg.quick else BERT_TOKENS
    layers = BERT[1:2] if cfg.quick else BERT
    for m in tokens:
        for k, n in layers:
            yield matmul_case(f"{m}x{k}x{n}", m, k, n, cfg, f"BERT-base M={m}", rng)
    for t, group in ((False, "thin x @ W"), (True, "thin x @ W.T")):
        for m in (DECODE_M[:1] if cfg.quick else DECODE_M):
            yield matmul_case(f"{m}x{DECODE_KN}x{DECODE_KN}", m, DECODE_KN, DECODE_KN, cfg, group, rng,
                              b_transposed=t)
