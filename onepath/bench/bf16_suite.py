"""bfloat16 rows of ``python -m onepath bench``: squares (onepath vs torch's bfloat16 matmul when
torch is importable, numpy float32 otherwise) and LLM decode M = 1, 4 with K = N = 4096 (GB/s of
bfloat16 weight streaming: ``onepath.linear`` on a prepacked weight vs torch's bfloat16 linear)."""
from __future__ import annotations

import numpy as np

import onepath
from onepath.dtypes import BF16

from .baselines import torch_or_none
from .core import BenchConfig, Case, aligned, register_suite

SQUARES = (512, 1024, 2048)
QUICK_SQUARES = (512,)
DECODE_M = (1, 4)
DECODE_KN = 4096


def _torch():
    return torch_or_none()  # an optional baseline only


def _meta(torch, **meta):
    return {**meta, **({} if torch is not None else {"missing_baselines": ["torch"]})}


def _to_torch(torch, x):
    return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)


def _square(s: int, cfg: BenchConfig, rng, torch) -> Case:
    a = aligned(rng.standard_normal((s, s), dtype=np.float32).astype(BF16))
    b = aligned(rng.standard_normal((s, s), dtype=np.float32).astype(BF16))
    c = aligned(np.empty((s, s), BF16))
    base = {}
    if torch is not None:
        ta, tb = _to_torch(torch, a), _to_torch(torch, b)
        tc = torch.empty((s, s), dtype=torch.bfloat16)
        base["torch"] = lambda: torch.matmul(ta, tb, out=tc).view(torch.int16).numpy().view(BF16)
    a32, b32 = aligned(a.astype(np.float32)), aligned(b.astype(np.float32))
    c32 = aligned(np.empty((s, s), np.float32))
    base["numpy_f32"] = lambda: np.matmul(a32, b32, out=c32)
    return Case(name=f"bf16 {s}x{s}x{s}", group="bf16 square", op="matmul", dtype="bfloat16",
                flops=2.0 * s ** 3, bytes=2.0 * 3 * s * s, run=lambda: onepath.matmul(a, b, out=c),
                baselines=base, rtol=3e-2, peak=None, meta=_meta(torch, m=s, k=s, n=s))


def _decode(m: int, cfg: BenchConfig, rng, torch, prepacked: bool = True) -> Case:
    """Decode x[m, k] @ W[n, k].T: with a prepacked weight, or with the raw (out, in) weight as
    torch.nn.Linear holds it (read in place, no repacking per call)."""
    k = n = DECODE_KN
    x = aligned(rng.standard_normal((m, k), dtype=np.float32).astype(BF16))
    w = aligned((rng.standard_normal((n, k), dtype=np.float32) / 64).astype(BF16))
    p = onepath.prepack(w) if prepacked else w
    base = {}
    if torch is not None:
        tx, tw = _to_torch(torch, x), _to_torch(torch, w)
        base["torch"] = lambda: torch.nn.functional.linear(tx, tw).view(torch.int16).numpy().view(BF16)
    x32, wt32 = aligned(x.astype(np.float32)), aligned(w.astype(np.float32).T)
    base["numpy_f32"] = lambda: x32 @ wt32
    group = "bf16 LLM decode (prepacked weight)" if prepacked else "bf16 LLM decode (raw weight)"
    return Case(name=f"bf16 decode {m}x{k}x{n}", group=group,
                op="linear", dtype="bfloat16", flops=2.0 * m * n * k, bytes=2.0 * (n * k + m * k + m * n),
                run=lambda: onepath.linear(x, p), baselines=base, rtol=3e-2, memory_bound=True,
                peak=None, meta=_meta(torch, m=m, k=k, n=n, prepacked=prepacked))


@register_suite("bf16", title="bfloat16 matmul / linear", order=20)
def bf16_suite(cfg: BenchConfig):
    rng = cfg.rng()
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(cfg.threads)
    sizes = cfg.shapes or (QUICK_SQUARES if cfg.quick else SQUARES)
    for s in sizes:
        yield _square(s, cfg, rng, torch)
    if cfg.shapes:
        return
    for prepacked in (True, False):
        for m in (DECODE_M[:1] if cfg.quick else DECODE_M):
            yield _decode(m, cfg, rng, torch, prepacked)
