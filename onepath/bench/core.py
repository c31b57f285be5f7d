"""Timing, suites and results of ``python -m onepath bench``.

A *suite* is a function that takes a ``BenchConfig`` and yields ``Case`` objects; it is registered
with ``@register_suite("name")`` in any module ``onepath/bench/*_suite.py`` (discovered on first
use, so adding a file is all it takes). A ``Case`` is a name, its flop count, the bytes it moves,
a callable running onepath and a dict of baseline callables (``{"numpy": ..., "torch": ...}``).

``measure_case`` times onepath and every baseline *alternately* in the same process (onepath,
numpy, onepath, numpy, ...) after a warm-up, each measurement looping the callable for at least
``min_time`` seconds; it keeps the median (and the best) seconds per call of ``repeat`` rounds.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from .._aligned import empty_aligned

# ------------------------------------------------------------------------------------------------
# Configuration and cases


@dataclass
class BenchConfig:
    """What a suite may read to size its cases.

    threads: thread count for onepath and the baselines (already applied when suites run).
    quick: fewer/smaller cases and shorter timing.
    shapes: explicit square sizes (``--shapes 64,128``) replacing a suite's default sizes, or None.
    repeat / min_time / warmup: timing rounds, minimum seconds per measurement, warm-up calls.
    seed: for the random inputs.
    """
    threads: int = 1
    quick: bool = False
    shapes: tuple[int, ...] | None = None
    repeat: int = 5
    min_time: float = 0.2
    warmup: int = 1
    seed: int = 0

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)


@dataclass
class Case:
    """One benchmark row.

    name: row label, e.g. ``"square 512"``.
    flops: floating-point operations of one call (2*M*N*K for a matmul).
    bytes: bytes one call must move at least (inputs read + outputs written).
    run: the onepath callable (no arguments). Its return value is compared with the first
        baseline's when ``rtol`` is set.
    baselines: name -> callable; the first one is the reference for the ratio column and the check.
    group: free-form label shown in the table's "group" column (e.g. ``"BERT-base M=128"``).
    op / dtype: the registry (op, dtype) onepath dispatches; used to show the kernel that ran and
        to pick the peak the "% of peak" column divides by (the peak of that kernel's level).
    rtol: relative tolerance (max-norm, scaled by the reference's max) of onepath's result against
        the first baseline's, or None for no check.
    memory_bound: show GB/s; None means decide from the arithmetic intensity (< 8 flop/byte).
    peak: which measured peak the "% of peak" divides by: ``"f32"`` (the FMA peak of the level),
        or None for no percentage.
    meta: extra fields copied into the JSON (shapes, batch, ...).
    kernel: the registry row the case runs, when the op picks among several per problem (conv's
        algorithms); default ``select(op, dtype)``.
    """
    name: str
    flops: float
    bytes: float
    run: Callable[[], object]
    baselines: dict[str, Callable[[], object]] = field(default_factory=dict)
    group: str = ""
    op: str | None = None
    dtype: str | None = None
    rtol: float | None = None
    memory_bound: bool | None = None
    peak: str | None = "f32"
    meta: dict = field(default_factory=dict)
    kernel: object = None

    @property
    def is_memory_bound(self) -> bool:
        if self.memory_bound is not None:
            return self.memory_bound
        return self.bytes > 0 and self.flops / self.bytes < 8.0


@dataclass
class Suite:
    name: str
    factory: Callable[[BenchConfig], Iterable[Case]]
    title: str
    default: bool = True
    order: int = 100
    per_call: bool = False  # its table shows microseconds per call instead of GFLOP/s


SUITES: dict[str, Suite] = {}
_discovered = False


def register_suite(name: str, *, title: str | None = None, default: bool = True, order: int = 100,
                   per_call: bool = False):
    """Decorator registering a suite factory ``f(cfg: BenchConfig) -> Iterable[Case]``.

    Args:
        name: suite name, selected with ``python -m onepath bench --suite NAME``.
        title: heading of its table (default: the name).
        default: run by a bare ``python -m onepath bench``.
        order: position among the suites (ascending; matmul float32 is 10).
        per_call: its table shows microseconds per call (small problems) instead of GFLOP/s.
    """
    def deco(factory):
        SUITES[name] = Suite(name, factory, title or name, default, order, per_call)
        return factory
    return deco


def discover() -> dict[str, Suite]:
    """Import every ``onepath.bench.*_suite`` module once so their suites register themselves."""
    global _discovered
    if not _discovered:
        from . import __path__ as pkg_path
        for mod in pkgutil.iter_modules(pkg_path):
            if mod.name.endswith("_suite"):
                importlib.import_module(f"onepath.bench.{mod.name}")
        _discovered = True
    return dict(sorted(SUITES.items(), key=lambda kv: (kv[1].order, kv[0])))


# ------------------------------------------------------------------------------------------------
# Timing


def aligned(x: np.ndarray, align: int = 64) -> np.ndarray:
    """A C-contiguous copy of ``x`` (same shape and dtype) whose data starts on an ``align``-byte
    boundary. Bench inputs go through it so that every side reads the same, cache-line aligned
    operands: torch allocates its own tensors 64-byte aligned, numpy only 16, and a tensor made
    with ``torch.from_numpy`` keeps numpy's address. oneDNN's AMX matmul ran 1.6-1.8x slower on
    rows 16 bytes off a line (the Intel AMX VM, 2026-12-05, bfloat16 512^3 / 2048^3 at 1 thread,
    torch 2.13: 1095 / 913 GFLOP/s aligned, 639 / 569 16 bytes off), so the bench's torch
    figures went up or down by that much with where numpy's allocator happened to put the arrays."""
    x = np.asarray(x)
    out = empty_aligned(x.shape, x.dtype, align)
    out[...] = x
    return out


def _loop(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0


def _calibrate(fn: Callable[[], object], min_time: float, warmup: int) -> int:
    """Warm up, then pick a call count whose loop lasts about ``min_time``."""
    for _ in range(max(0, warmup - 1)):
        fn()
    t = _loop(fn, 1)
    n = 1
    while t < min_time / 10 and n < 1 << 24:  # grow on fast calls so timer overhead is negligible
        n *= 4
        t = _loop(fn, n)
    per = t / n
    return max(1, math.ceil(min_time / per)) if per > 0 else n


SETTLE_S = 0.12  # > OpenBLAS's default spin-wait of its idle threads (2**28 cycles, ~0.1 s)


def alternate(funcs: dict[str, Callable[[], object]], *, repeat: int, min_time: float, warmup: int = 1,
              tick: Callable[[], None] | None = None, settle: float = 0.0) -> dict[str, dict]:
    """Time several callables alternately: calibrate each, then ``repeat`` rounds of one
    measurement of each in turn. Returns name -> {"median": s/call, "best": s/call, "samples": [...]}.

    ``settle`` (seconds, for multi-threaded runs): before each measurement, wait that long and make
    one untimed call, so the previous implementation's spinning worker threads (OpenBLAS, OpenMP)
    have gone to sleep and do not steal the cores from the one being timed.
    """
    counts = {name: _calibrate(fn, min_time, warmup) for name, fn in funcs.items()}
    samples: dict[str, list[float]] = {name: [] for name in funcs}
    for _ in range(max(1, repeat)):
        for name, fn in funcs.items():
            if settle > 0:
                time.sleep(settle)
                fn()
            samples[name].append(_loop(fn, counts[name]) / counts[name])
            if tick is not None:
                tick()
    return {name: {"median": statistics.median(s), "best": min(s), "samples": s, "calls": counts[name]}
            for name, s in samples.items()}


def _rel_err(got, ref) -> float | None:
    try:
        g = np.asarray(got, np.float64)
        r = np.asarray(ref, np.float64)
    except (TypeError, ValueError):
        return None
    if g.shape != r.shape:
        return math.inf
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    err = float(np.max(np.abs(g - r))) if r.size else 0.0
    return err / scale if scale > 0 else err


def _kernel_of(case: Case):
    if case.kernel is not None:
        return case.kernel
    if case.op is None or case.dtype is None:
        return None
    try:
        from ..dispatch import select
        meta = case.meta or {}
        if case.op == "matmul" and case.dtype == "float32" and {"m", "k", "n"} <= meta.keys():
            from ..dispatch.cap import isa
            from ..ops import _small  # a small product runs the small kernel, not the GEMM row
            m, k, n = meta["m"], meta["k"], meta["n"]
            if _small.use_small(m * n * k, "matmul", "float32", k * n, m, n=n):
                return _small.row_for("matmul", isa(), "float32")
        return select(case.op, case.dtype)
    except Exception:  # noqa: BLE001 - an op not in the registry just shows no kernel
        return None


def measure_case(case: Case, cfg: BenchConfig, peaks: dict[str, float] | None = None,
                 tick: Callable[[], None] | None = None) -> dict:
    """Run one case: a correctness check against the first baseline, then alternating timing.

    ``peaks`` maps a level name to its measured FMA peak (GFLOP/s) at ``cfg.threads`` threads.
    Returns the JSON-ready result row.
    """
    funcs = {"onepath": case.run, **case.baselines}
    err = None
    if case.rtol is not None and case.baselines:
        ref_name = next(iter(case.baselines))
        err = _rel_err(case.run(), case.baselines[ref_name]())
    times = alternate(funcs, repeat=cfg.repeat, min_time=cfg.min_time, warmup=cfg.warmup, tick=tick,
                      settle=SETTLE_S if cfg.threads > 1 else 0.0)
    kernel = _kernel_of(case)
    row: dict = {
        "suite": None, "group": case.group, "name": case.name,
        "flops": case.flops, "bytes": case.bytes,
        "memory_bound": case.is_memory_bound,
        "kernel": kernel.name if kernel is not None else None,
        "kernel_level": kernel.level if kernel is not None else None,
        "kernel_mrnr": f"{kernel.mr}x{kernel.nr}" if kernel is not None else None,
        "kernel_blocking": ([kernel.mc, kernel.kc, kernel.nc, getattr(kernel, "blocking_from", None)]
                            if kernel is not None and kernel.algorithm != "small" else None),  # no blocking
        "max_rel_err": err, "check_ok": None if err is None else bool(err <= case.rtol),
        "impls": {}, **({"meta": case.meta} if case.meta else {}),
    }
    for name, t in times.items():
        sec = t["median"]
        row["impls"][name] = {
            "seconds": sec, "best_seconds": t["best"], "calls_per_measurement": t["calls"],
            "gflops": case.flops / sec / 1e9 if sec > 0 else None,
            "gbs": case.bytes / sec / 1e9 if sec > 0 else None,
            "samples": t["samples"],  # seconds per call of each round (bench compare tests them)
        }
    one = row["impls"]["onepath"]
    peak = None
    if case.peak == "f32" and peaks:
        level = kernel.level if kernel is not None else None
        peak = peaks.get(level) if level else None
    row["peak_gflops"] = peak
    row["pct_peak"] = 100.0 * one["gflops"] / peak if peak and one["gflops"] else None
    row["ratios"] = {name: (row["impls"][name]["seconds"] / one["seconds"]) if one["seconds"] > 0 else None
                     for name in case.baselines}  # >1: onepath is faster
    return row


# ------------------------------------------------------------------------------------------------
# Peak


def peak_f32(level: str, threads: int, seconds: float = 0.2, repeat: int = 3) -> float:
    """GFLOP/s of the level's FMA loop (``op_peak_f32``) run in ``threads`` Python threads at once
    (the C call releases the GIL); best of ``repeat`` runs of about ``seconds`` each."""
    from ..kernels import load
    fn = load(level).lib.op_peak_f32
    iters = 1 << 14
    while True:  # calibrate on one thread
        t0 = time.perf_counter()
        fn(iters)
        dt = time.perf_counter() - t0
        if dt >= seconds / 8 or iters >= 1 << 40:
            break
        iters *= 4
    iters = max(1, int(iters * seconds / max(dt, 1e-9)))
    best = 0.0
    for _ in range(max(1, repeat)):
        flops = [0] * threads
        barrier = threading.Barrier(threads + 1)

        def work(i):
            barrier.wait()
            flops[i] = fn(iters)

        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in pool:
            t.join()
        dt = time.perf_counter() - t0
        best = max(best, sum(flops) / dt / 1e9)
    return best

