"""``python -m onepath tune``: measure the cache blocking (MC, KC, NC) of every registry row this host
can run and write the fastest to this host's tuning file (``onepath/dispatch/tuning.py``).

For each (op, dtype, ISA level) the search starts from what dispatch uses without a tuning file (a
shipped ``TUNING`` row or the cache model, ``registry.blocking_for``), then sweeps KC, MC and NC in
turn around the best so far (coordinate descent, one pass with ``--quick``, two otherwise), scoring
a candidate by the geometric mean of its GFLOP/s over the row's problems (the best of a few timed
rounds each). A candidate must beat the incumbent by ``MARGIN`` to replace it, and the winner is
timed again alternately with the starting blocking (``CONFIRM_ROUNDS`` times, best of each): it is
kept only if it still wins by ``MARGIN``. Every
candidate's result is checked against numpy; one that differs is dropped (and reported).

The kernels are called directly through the level's C entry points (``op_gemm_f32``,
``op_gemm_bf16``, ``op_conv2d_f32``, ``op_conv2d_bf16``), with the blocking under test, so dispatch
and its caches are not involved while measuring.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

OPS = ("matmul", "linear", "conv2d")
DTYPES = ("float32", "bfloat16")
MARGIN = 1.02          # a candidate must be 2 % faster than the incumbent to replace it
CONFIRM_ROUNDS = 4     # alternated timings of the winner and the starting blocking
_NATIVE_LEVELS = ("avx512_core", "avx512_core_bf16", "avx512_core_amx")


class TuneError(Exception):
    """A usage error (unknown op/dtype, bad threads): the CLI prints it and exits with code 2."""


# ------------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class Problem:
    """One measured problem. GEMM: (m, n, k); conv: NCHW batch 1, c -> oc channels, h x h plane,
    kh x kh kernel, stride 1, padding kh // 2."""
    kind: str          # "gemm" or "conv"
    dims: tuple

    @property
    def flops(self) -> float:
        if self.kind == "gemm":
            m, n, k = self.dims
            return 2.0 * m * n * k
        c, h, oc, kh = self.dims
        return 2.0 * c * oc * kh * kh * h * h

    @property
    def label(self) -> str:
        if self.kind == "gemm":
            return "x".join(map(str, self.dims))
        c, h, oc, kh = self.dims
        return f"ic{c}ih{h}oc{oc}kh{kh}"


def problems(op: str, level: str, quick: bool) -> list[Problem]:
    """The problems a row is tuned on: the bench's shapes, smaller below the AVX-512 levels (slower
    kernels) and fewer with ``quick``."""
    fast = level in _NATIVE_LEVELS
    if op == "matmul":
        sizes = ([1024] if fast else [512]) if quick else ([512, 1024, 2048] if fast else [512, 1024])
        return [Problem("gemm", (s, s, s)) for s in sizes]
    if op == "linear":  # (M, N, K): x (M, K) @ W(N, K).T, transformer-like
        dims = ([(256, 4096, 1024)] if fast else [(128, 2048, 512)]) if quick else \
            ([(128, 3072, 768), (512, 4096, 1024)] if fast else [(128, 3072, 768)])
        return [Problem("gemm", d) for d in dims]
    # conv2d: ResNet-50 3x3 layers (res3, and res4 / res2 without --quick), batch 1
    dims = [(128, 28, 128, 3)] if quick else ([(128, 28, 128, 3), (256, 14, 256, 3), (64, 56, 64, 3)]
                                              if fast else [(128, 28, 128, 3), (256, 14, 256, 3)])
    return [Problem("conv", d) for d in dims]


# ------------------------------------------------------------------------------------------------
# Running one row with an explicit blocking


class Runner:
    """One (row, problem): operands allocated once; ``run(blk)`` calls the row's C entry point with
    the blocking ``blk`` = (mc, kc, nc); ``check(blk)`` compares the result with numpy."""

    def __init__(self, row, problem: Problem, threads: int, seed: int = 0):
        from .dtypes import BF16
        from .kernels import load
        self.row, self.problem, self.threads = row, problem, threads
        mod = load(row.level)
        self.ffi, self.lib = mod.ffi, mod.lib
        ffi = self.ffi
        rng = np.random.default_rng(seed)
        bf16 = row.dtype == "bfloat16"
        self.bf16 = bf16
        self._blk = ffi.new("op_blocking *")
        if problem.kind == "gemm":
            m, n, k = problem.dims
            a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
            if row.op == "linear":
                w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
                b = w.T                       # B = weight^T: rsb = 1, csb = k
            else:
                b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
            if bf16:
                a, b = a.astype(BF16), (w.astype(BF16).T if row.op == "linear" else b.astype(BF16))
            self.a, self.b = a, b
            self.c = np.empty((m, n), BF16 if bf16 else np.float32)
            self._ref = np.matmul(a.astype(np.float32), b.astype(np.float32))
            es = 2 if bf16 else 4
            ct = "const uint16_t *" if bf16 else "const float *"
            args = (1, m, n, k,
                    ffi.cast(ct, a.ctypes.data), ffi.NULL, a.strides[0] // es, a.strides[1] // es,
                    ffi.cast(ct, b.ctypes.data), ffi.NULL, b.strides[0] // es, b.strides[1] // es)
            if bf16:
                cargs = (ffi.cast("void *", self.c.ctypes.data), ffi.NULL, n, 1, 1)
                fn = self.lib.op_gemm_bf16
            else:
                cargs = (ffi.cast("float *", self.c.ctypes.data), ffi.NULL, n, 1)
                fn = self.lib.op_gemm_f32
            self._call = lambda: fn(*args, *cargs, self._blk, ffi.NULL, threads)
        else:
            c, h, oc, kh = problem.dims
            x = rng.uniform(-1, 1, (1, c, h, h)).astype(np.float32)
            w = rng.uniform(-1, 1, (oc, c, kh, kh)).astype(np.float32)
            if bf16:
                x, w = x.astype(BF16), w.astype(BF16)
            self.x, self.w = x, w
            d = ffi.new("op_conv_desc *")
            d.n, d.c, d.h, d.w = 1, c, h, h
            d.oc, d.oh, d.ow = oc, h, h
            d.kh = d.kw = kh
            d.sh = d.sw = d.dh = d.dw = 1
            d.pt = d.pl = kh // 2
            d.groups = 1
            d.nhwc = 0
            self.desc = d
            self._ref = _conv_ref(x.astype(np.float32), w.astype(np.float32), kh // 2)
            if row.symbol == "op_conv2d_bf16":
                self.c = np.empty((1, oc, h, h), BF16)
                fn = self.lib.op_conv2d_bf16
                args = (d, ffi.cast("const uint16_t *", x.ctypes.data),
                        ffi.cast("const uint16_t *", w.ctypes.data), ffi.NULL,
                        ffi.cast("void *", self.c.ctypes.data), 1, 0)
            else:  # float32 kernels (bfloat16 input widened while packing, weight as float32)
                self.c = np.empty((1, oc, h, h), np.float32)
                self._wf = w.astype(np.float32)
                fn = self.lib.op_conv2d_f32
                args = (d, ffi.cast("const void *", x.ctypes.data), 1 if bf16 else 0,
                        ffi.cast("const float *", self._wf.ctypes.data), ffi.NULL,
                        ffi.cast("float *", self.c.ctypes.data), 0)
            self._call = lambda: fn(*args, self._blk, threads)

    def run(self, blk) -> None:
        self._blk.mc, self._blk.kc, self._blk.nc = blk
        used = self._call()
        if used < 0:
            raise MemoryError(f"{self.row.name}: kernel returned {used} for blocking {blk}")

    def check(self, blk) -> float:
        """Max-norm error of the result with ``blk``, relative to the reference's max."""
        self.c[...] = 0
        self.run(blk)
        got = self.c.astype(np.float32)
        scale = float(np.max(np.abs(self._ref))) or 1.0
        return float(np.max(np.abs(got - self._ref))) / scale

    def tolerance(self) -> float:
        k = self.problem.dims[2] if self.problem.kind == "gemm" else \
            self.problem.dims[0] * self.problem.dims[3] ** 2
        # bfloat16: the output is rounded to 8 bits of mantissa; float32: summation order only
        return 1e-2 if self.bf16 else 4 * k * np.finfo(np.float32).eps

    def seconds(self, blk, min_time: float, rounds: int) -> float:
        """Best seconds per call over ``rounds`` measurements of at least ``min_time`` each."""
        self.run(blk)  # warm-up (packing buffers, pages)
        t0 = time.perf_counter()
        self.run(blk)
        one = max(time.perf_counter() - t0, 1e-7)
        n = max(1, math.ceil(min_time / one))
        best = one
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(n):
                self.run(blk)
            best = min(best, (time.perf_counter() - t0) / n)
        return best


def _conv_ref(x, w, pad):
    """float32 NCHW conv, stride 1, by im2col and one matmul (numpy)."""
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    s = xp.strides
    win = np.lib.stride_tricks.as_strided(xp, (n, c, kh, kw, h, wd), (s[0], s[1], s[2], s[3], s[2], s[3]))
    cols = np.ascontiguousarray(win).reshape(n, c * kh * kw, h * wd)
    return np.matmul(w.reshape(oc, -1), cols).reshape(n, oc, h, wd)


# ------------------------------------------------------------------------------------------------
# The search


@dataclass
class RowResult:
    """What ``tune`` found for one (op, dtype, level)."""
    op: str
    dtype: str
    level: str
    kernel: str
    start: tuple            # blocking dispatch used without a tuning file
    start_from: str         # "shipped" or "cache model"
    start_gflops: float
    chosen: tuple
    gflops: float
    peak_gflops: float | None
    problems: list
    tried: list = field(default_factory=list)   # [{"mc", "kc", "nc", "gflops"} | {"error"}]
    rejected: list = field(default_factory=list)

    @property
    def pct_peak(self) -> float | None:
        return 100.0 * self.gflops / self.peak_gflops if self.peak_gflops else None

    def file_row(self) -> dict:
        mc, kc, nc = self.chosen
        out = {"op": self.op, "dtype": self.dtype, "level": self.level, "mc": mc, "kc": kc, "nc": nc,
               "gflops": round(self.gflops, 2), "model_gflops": round(self.start_gflops, 2),
               "problem": ",".join(p.label for p in self.problems)}
        if self.pct_peak is not None:
            out["pct_peak"] = round(self.pct_peak, 1)
        return out


def _round(v: float, step: int, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, step * max(1, round(v / step)))))


def candidates(dim: str, value: int, row, quick: bool) -> list[int]:
    """Values of ``dim`` ("mc", "kc", "nc") to try around ``value``, rounded to what the driver
    uses (MC to MR, NC to NR, KC to the packing depth granule)."""
    from .dispatch.tuning import LIMITS
    step = {"mc": row.mr, "nc": row.nr, "kc": max(16, row.k_align)}[dim]
    factors = (0.5, 0.75, 1.0, 1.5, 2.0) if quick else (0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 2.0)
    if dim == "nc":
        factors = (0.25, 0.5, 1.0, 2.0) if quick else (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    return sorted({_round(value * f, step, step, LIMITS[dim] // step * step) for f in factors})


def tune_row(row, threads: int, quick: bool, peak: float | None, advance=lambda: None,
             describe=lambda text: None) -> RowResult:
    """Tune one raw registry row (its (op, dtype, level) key); see the module docstring."""
    from .dispatch import registry
    base = registry._blocked(row, _host().uarch, registry._cpu_key(_host()), False)
    start = (base.mc, base.kc, base.nc)
    probs = problems(row.op, row.level, quick)
    runners = [Runner(row, p, threads) for p in probs]
    min_time, rounds = (0.02, 3) if quick else (0.03, 7)
    scores: dict[tuple, float] = {}
    res = RowResult(row.op, row.dtype, row.level, row.name, start, base.blocking_from, 0.0, start, 0.0,
                    peak, probs)

    def score(blk) -> float:
        blk = tuple(int(v) for v in blk)
        if blk in scores:
            return scores[blk]
        same = _effective(row, probs, blk)
        twin = next((b for b in scores if _effective(row, probs, b) == same), None)
        if twin is not None:  # runs exactly as a blocking already measured (e.g. NC >= N): no new timing
            scores[blk] = scores[twin]
            return scores[blk]
        for r in runners:
            err = r.check(blk)
            if not err <= r.tolerance():
                res.rejected.append({"mc": blk[0], "kc": blk[1], "nc": blk[2], "problem": r.problem.label,
                                     "rel_err": err})
                scores[blk] = 0.0
                return 0.0
        logs = [math.log(r.problem.flops / r.seconds(blk, min_time, rounds) / 1e9) for r in runners]
        g = math.exp(sum(logs) / len(logs))
        scores[blk] = g
        res.tried.append({"mc": blk[0], "kc": blk[1], "nc": blk[2], "gflops": round(g, 2)})
        advance()
        return g

    describe(f"{row.op} {row.dtype} {row.level}")
    best, best_g = start, score(start)
    for _ in range(1 if quick else 2):
        for dim in ("kc", "mc", "nc"):  # KC first: it sizes the micro-panels MC and NC hold
            i = ("mc", "kc", "nc").index(dim)
            for v in candidates(dim, best[i], row, quick):
                blk = best[:i] + (v,) + best[i + 1:]
                g = score(blk)
                if g > best_g * MARGIN:
                    best, best_g = blk, g
    # confirm: time the winner and the start alternately (best of each: other load on the machine
    # only ever slows a measurement down); keep the start unless the winner still wins by MARGIN
    if _effective(row, probs, best) != _effective(row, probs, start):
        a = b = 0.0
        for _ in range(CONFIRM_ROUNDS):
            a = max(a, _geo(runners, start, min_time, rounds))
            b = max(b, _geo(runners, best, min_time, rounds))
        if b < a * MARGIN:
            best, b = start, a
        res.start_gflops, res.gflops = a, b
    else:
        best = start
        res.start_gflops = res.gflops = scores[start]
    res.chosen = best
    return res


def _effective(row, probs, blk) -> tuple:
    """The blocking the driver really runs on each GEMM problem (MC, KC, NC rounded as the driver
    rounds them and clipped to M, K, N); conv problems keep ``blk`` (their GEMM shape is the
    kernel's business)."""
    up = lambda v, q: -(-v // q) * q  # noqa: E731
    mc, kc, nc = up(blk[0], row.mr), up(blk[1], row.k_align), up(blk[2], row.nr)
    out = []
    for p in probs:
        if p.kind == "gemm":
            m, n, k = p.dims
            out.append((min(mc, up(m, row.mr)), min(kc, up(k, row.k_align)), min(nc, up(n, row.nr))))
        else:
            out.append((mc, kc, nc))
    return tuple(out)


def _geo(runners, blk, min_time, rounds) -> float:
    logs = [math.log(r.problem.flops / r.seconds(blk, min_time, rounds) / 1e9) for r in runners]
    return math.exp(sum(logs) / len(logs))


def _host():
    from .dispatch.cpu import probe
    return probe()


def targets(ops=OPS, dtypes=DTYPES) -> list:
    """One raw registry row per (op, dtype, level) the host can run, fastest level first: the
    GEMM row (conv2d: its implicit-GEMM row, whose blocking every GEMM-based conv algorithm uses)."""
    import onepath
    from .dispatch import REGISTRY
    avail = set(onepath.available_isas())
    seen, out = set(), []
    for r in REGISTRY:
        key = (r.level, r.op, r.dtype)
        if r.op in ops and r.dtype in dtypes and r.level in avail and key not in seen \
                and r.algorithm in ("gemm", "implicit_gemm"):
            seen.add(key)
            out.append(r)
    return out


def expected_candidates(row, quick: bool) -> int:
    """Rough number of candidates one row measures (for the progress bar)."""
    return 1 + 2 * (len(candidates("kc", 256, row, quick)) + len(candidates("mc", 128, row, quick))
                    + len(candidates("nc", 2048, row, quick)) - 3) * (1 if quick else 2) // 2


# ------------------------------------------------------------------------------------------------
# Command


def run(*, ops=None, dtypes=None, levels=None, threads: int | None = None, quick: bool = False,
        json_path: str | None = None, out_path: str | None = None, write: bool = True,
        progress: bool = True, out=None) -> dict:
    """Tune the selected rows, print the table, write the tuning file (merged with the rows of a
    valid existing file for this host that were not re-measured). Returns the JSON document
    (also written to ``json_path``)."""
    import datetime as _dt

    import onepath
    from .bench.cli import print_table, progress_bar
    from .bench.core import peak_f32
    from .dispatch import tuning
    out = out or sys.stdout
    ops = tuple(ops or OPS)
    dtypes = tuple(dtypes or DTYPES)
    for o in ops:
        if o not in OPS:
            raise TuneError(f"unknown --op {o!r}; valid: {', '.join(OPS)}")
    for d in dtypes:
        if d not in DTYPES:
            raise TuneError(f"unknown --dtype {d!r}; valid: {', '.join(DTYPES)}")
    threads = threads or onepath.get_num_threads()
    if threads < 1:
        raise TuneError(f"--threads must be a positive integer, got {threads}")
    cpu = _host()
    rows = targets(ops, dtypes)
    if levels:
        bad = [lv for lv in levels if lv not in onepath.available_isas()]
        if bad:
            raise TuneError(f"--level {', '.join(bad)}: not a level this host can run; valid: "
                            f"{', '.join(onepath.available_isas())}")
        rows = [r for r in rows if r.level in levels]
    mode, explicit = tuning.env_setting()
    path = out_path or (explicit if mode == "explicit" else tuning.default_path(cpu))
    print(f"onepath {onepath.__version__} tune | {cpu.brand or '?'} | {cpu.vendor} {cpu.uarch} "
          f"(family {cpu.family} model {cpu.model} stepping {cpu.stepping}) | {threads} threads | "
          f"{len(rows)} rows{' (quick)' if quick else ''}", file=out)
    out.flush()
    t_start = time.perf_counter()
    results: list[RowResult] = []
    peaks: dict[str, float | None] = {}
    total = len({r.level for r in rows}) + sum(expected_candidates(r, quick) for r in rows)
    with progress_bar(total, progress and sys.stderr.isatty()) as (advance, describe):
        for r in rows:
            if r.level not in peaks:
                describe(f"FMA peak {r.level}")
                try:
                    peaks[r.level] = peak_f32(r.level, threads, seconds=0.05, repeat=3)
                except (ImportError, ValueError, AttributeError):
                    peaks[r.level] = None
                advance()
            pk = peaks[r.level]
            if pk and r.elem_bytes == 2:
                pk *= 2  # VDPBF16PS / TDPBF16PS: two products per float32 lane (nominal)
            results.append(tune_row(r, threads, quick, pk, advance, describe))
    elapsed = time.perf_counter() - t_start

    cells = []
    for res in results:
        gain = res.gflops / res.start_gflops if res.start_gflops else None
        cells.append([f"{res.op} {res.dtype}", res.level, res.kernel, res.start_from,
                      "/".join(map(str, res.start)), f"{res.start_gflops:.1f}",
                      "/".join(map(str, res.chosen)), f"{res.gflops:.1f}",
                      "-" if res.pct_peak is None else f"{res.pct_peak:.0f}",
                      "-" if gain is None else f"{gain:.2f}", str(len(res.tried))])
    print_table("tune: cache blocking per row (MC/KC/NC; GFLOP/s = geometric mean over the row's problems)",
                ["group", "level", "kernel", "start from", "start", "GFLOP/s", "chosen", "GFLOP/s",
                 "% peak", "x start", "tried"], cells, file=out)
    bad = [(res, rj) for res in results for rj in res.rejected]
    for res, rj in bad:
        print(f"! {res.op} {res.dtype} {res.level}: blocking {rj['mc']}/{rj['kc']}/{rj['nc']} gave a "
              f"wrong result on {rj['problem']} (rel err {rj['rel_err']:.2e}); not used", file=out)
    print("% peak: of the level's measured float32 FMA peak (x2 for the native bfloat16 kernels); "
          f"x start: chosen / starting blocking. {elapsed:.0f} s.", file=out)

    file_rows = [res.file_row() for res in results]
    written = None
    if write:
        keep = []
        try:  # keep the rows of a valid file for this host that this run did not measure
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            tuning.parse(old, cpu)
            done = {(r["level"], r["op"], r["dtype"]) for r in file_rows}
            keep = [r for r in old["rows"] if (r["level"], r["op"], r["dtype"]) not in done]
        except (OSError, ValueError):
            pass
        doc = tuning.document(cpu, keep + file_rows, threads=threads, quick=quick)
        written = tuning.write(path, doc)
        print(f"wrote {written} ({len(keep + file_rows)} rows); the next process uses it "
              f"(ONEPATH_TUNING=off ignores it)", file=out)
    report = {
        "schema": 1,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv, "cpu": tuning.fingerprint(cpu), "brand": cpu.brand,
        "onepath_version": onepath.__version__, "threads": threads, "quick": quick,
        "seconds": round(elapsed, 1), "tuning_file": None if written is None else str(written),
        "peaks": peaks,
        "rows": [{**res.file_row(), "kernel": res.kernel, "start": list(res.start),
                  "start_from": res.start_from, "tried": res.tried, "rejected": res.rejected}
                 for res in results],
    }
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {json_path}", file=sys.stderr)
    return report
