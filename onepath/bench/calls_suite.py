"""The ``calls`` suite of ``python -m onepath bench`` (issue 9): the cost of one call on small problems,
in microseconds, with numpy (and torch when installed) timed alternately beside it.

Rows (float32): matmul M = N = K = 4, 16, 32, 64, 128, 256; ``linear`` x (8, 384) by W (384, 384)
with the raw weight (numpy baseline ``x @ W.T``) and with ``onepath.prepack(W)``, and the same rows
as a 3-D x (2, 4, 384); transposed operands at 64^3: ``x.T @ dy`` and 8 entries of ``q @
k.transpose(0, 2, 1)``; narrow products (``NARROW``): a vector dot product, matrix times vector,
a row-major B of 2, 4 and 8 columns; conv2d (1, 16, 8, 8) * (16, 16, 3, 3), padding 1
(torch.nn.functional.conv2d baseline). Run it with one
thread for the issue's bars: ``python -m onepath bench --suite calls --threads 1``. The ratio
columns are baseline time / onepath time (> 1: onepath is faster).
"""
from __future__ import annotations

import numpy as np

import onepath

from .core import BenchConfig, Case, register_suite

SQUARES = (4, 16, 32, 64, 128, 256)
QUICK_SQUARES = (4, 32, 64, 128)
# (m, k, n) of the narrow rows: a dot product, matrix times vector, B of 2 and of 4 columns (the
# last past the small kernel's limits at avx2: the packed GEMM's driver)
NARROW = ((1, 4096, 1), (1024, 1024, 1), (1024, 1024, 2), (4096, 1024, 4), (4096, 512, 8))


def _torch():
    try:
        import torch
    except Exception:  # optional baseline
        return None
    return torch


def _small_row(op: str, mnk: int):
    """The registry row a float32 call of M*N*K = mnk runs: the small kernel's, else None (the
    bench then shows ``select(op, "float32")``, the packed GEMM)."""
    from onepath.ops import _small
    return _small.row_for(op, onepath.isa()) if _small.use_small(mnk, op) else None


def _matmul(s: int, rng, torch) -> Case:
    a = rng.standard_normal((s, s), dtype=np.float32)
    b = rng.standard_normal((s, s), dtype=np.float32)
    base = {"numpy": lambda: np.matmul(a, b)}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        base["torch"] = lambda: torch.matmul(ta, tb)
    return Case(name=f"matmul {s}x{s}x{s}", group="matmul f32", op="matmul", dtype="float32",
                flops=2.0 * s ** 3, bytes=4.0 * 3 * s * s, run=lambda: onepath.matmul(a, b),
                baselines=base, rtol=1e-4, memory_bound=False, meta={"m": s, "k": s, "n": s},
                kernel=_small_row("matmul", s ** 3))


def _matmul_t(s: int, rng, torch, batch: int = 0) -> Case:
    """Transposed operands: ``x.T @ dy`` (2-D, A transposed: a weight gradient) or, with ``batch``
    entries, ``q @ k.transpose(0, 2, 1)`` (B transposed in each entry: attention scores)."""
    x = rng.standard_normal((batch, s, s) if batch else (s, s), dtype=np.float32)
    y = rng.standard_normal(x.shape, dtype=np.float32)
    if batch:
        a, b, name = x, y.transpose(0, 2, 1), f"matmul {batch}x({s}x{s}) @ ({s}x{s}).T"
    else:
        a, b, name = x.T, y, f"matmul ({s}x{s}).T @ {s}x{s}"
    base = {"numpy": lambda: np.matmul(a, b)}
    if torch is not None:
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        base["torch"] = ((lambda: torch.matmul(tx, ty.transpose(1, 2))) if batch
                         else (lambda: torch.matmul(tx.T, ty)))
    nb = max(batch, 1)
    return Case(name=name, group="matmul f32", op="matmul", dtype="float32",
                flops=2.0 * nb * s ** 3, bytes=4.0 * 3 * nb * s * s,
                run=lambda: onepath.matmul(a, b), baselines=base, rtol=1e-4, memory_bound=False,
                meta={"m": s, "k": s, "n": s}, kernel=_small_row("matmul", s ** 3))


def _linear(rng, torch, packed: bool, lead: tuple = (8,)) -> Case:
    """x (*lead, 384) by W (384, 384); ``lead`` (2, 4): the same 8 rows as a 3-D x (batch, tokens)."""
    m, k, n = int(np.prod(lead)), 384, 384
    x = rng.standard_normal(lead + (k,), dtype=np.float32)
    w = (rng.standard_normal((n, k), dtype=np.float32) / np.sqrt(k)).astype(np.float32)
    wt = onepath.prepack(w) if packed else w
    base = {"numpy": lambda: x @ w.T}
    if torch is not None:
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        base["torch"] = lambda: torch.nn.functional.linear(tx, tw)
    xs = ",".join(map(str, lead + (k,)))
    return Case(name=f"linear ({xs})x({n},{k}){' prepacked' if packed else ''}", group="linear f32",
                op="linear", dtype="float32", flops=2.0 * m * k * n, bytes=4.0 * (m * k + k * n + m * n),
                run=lambda: onepath.linear(x, wt), baselines=base, rtol=1e-4, memory_bound=False,
                meta={"m": m, "k": k, "n": n, "prepacked": packed}, kernel=_small_row("linear", m * k * n))


def _narrow(m: int, k: int, n: int, rng, torch) -> Case:
    """A product with one or a few columns: a vector dot product (m = n = 1, both 1-D), a matrix
    times a vector (n = 1, b 1-D) or a row-major B of n columns."""
    a = rng.standard_normal((m, k) if m > 1 else (k,), dtype=np.float32)
    b = rng.standard_normal((k, n) if n > 1 else (k,), dtype=np.float32)
    base = {"numpy": lambda: np.matmul(a, b)}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        base["torch"] = lambda: torch.matmul(ta, tb)
    name = "x".join(map(str, a.shape)) + " @ " + "x".join(map(str, b.shape))
    from onepath.ops import _small
    small = _small.use_small(m * n * k, "matmul", "float32", n * k, m, n=n)
    return Case(name=f"matmul {name}", group="matmul f32 narrow", op="matmul", dtype="float32",
                flops=2.0 * m * n * k, bytes=4.0 * (m * k + k * n + m * n),
                run=lambda: onepath.matmul(a, b), baselines=base, rtol=1e-4, memory_bound=True,
                meta={"m": m, "k": k, "n": n},
                kernel=_small.row_for("matmul", onepath.isa()) if small else None)


def _conv(rng, torch) -> Case:
    x = rng.standard_normal((1, 16, 8, 8), dtype=np.float32)
    w = (rng.standard_normal((16, 16, 3, 3), dtype=np.float32) / 12.0).astype(np.float32)
    base = {}
    if torch is not None:
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)

        def tconv():
            with torch.no_grad():
                return torch.nn.functional.conv2d(tx, tw, padding=1)
        base["torch"] = tconv
    from onepath.ops import conv as _c
    return Case(name="conv2d (1,16,8,8)*(16,16,3,3) pad 1", group="conv2d f32", op="conv2d",
                dtype="float32", flops=2.0 * 16 * 8 * 8 * 16 * 9, bytes=4.0 * (2 * 16 * 64 + 16 * 16 * 9),
                run=lambda: onepath.conv2d(x, w, padding=1), baselines=base, rtol=1e-4 if base else None,
                memory_bound=False, kernel=_c.select_conv("implicit_gemm", "float32"))


@register_suite("calls", title="calls: microseconds per call on small problems",
                order=90, per_call=True)
def calls_suite(cfg: BenchConfig):
    rng = cfg.rng()
    torch = _torch()
    for s in cfg.shapes or (QUICK_SQUARES if cfg.quick else SQUARES):
        yield _matmul(s, rng, torch)
    yield _matmul_t(64, rng, torch)
    yield _matmul_t(64, rng, torch, batch=8)
    yield _linear(rng, torch, packed=False)
    yield _linear(rng, torch, packed=True)
    yield _linear(rng, torch, packed=False, lead=(2, 4))
    for m, k, n in NARROW:
        yield _narrow(m, k, n, rng, torch)
    yield _conv(rng, torch)
