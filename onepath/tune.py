"""``python -m onepath tune``: measure the cache blocking (MC, KC, NC) of every registry row this host
can run, and the kernel choices that pay on some hosts, and write the fastest to this host's tuning
file (``onepath/dispatch/tuning.py``).

For each (op, dtype, ISA level) the search starts from what dispatch uses without a tuning file (a
shipped ``TUNING`` row or the cache model, ``registry.blocking_for``), then sweeps KC, MC and NC in
turn around the best so far (coordinate descent, one pass with ``--quick``, two otherwise), scoring
a candidate by the geometric mean of its GFLOP/s over the row's problems (the best of a few timed
rounds each). A candidate must beat the incumbent by ``MARGIN`` to replace it, and the winner is
timed again alternately with the starting blocking (``CONFIRM_ROUNDS`` times, best of each): it is
kept only if it still wins by ``MARGIN``. Every
candidate's result is checked against numpy; one that differs is dropped (and reported).

Then, with the blocking just chosen, the choices (the file's ``choices``):

* conv algorithm: for each conv row's (level, dtype), the NCHW formulation against NCHW tensors
  computed in the NHWC formulation (``registry.CONV_NCHW_AS_NHWC``), timed alternately on
  ResNet-50 layers of each problem class (3x3; 1x1 at batch 8; strided 1x1) at several output
  planes; per class the plane limit with the least summed log time is kept if it saves more than
  ``MARGIN`` over the shipped rule (``as_nhwc_threshold``);
* 256-bit kernels: each float32 (and widened bfloat16) GEMM row of matmul / linear at an AVX-512
  level against the avx2 row's kernel on the same problems; the avx2 kernel is chosen only if it
  is faster by ``KERNEL_MARGIN`` (``kernel_level``; it then runs every problem size of that op);
* thin float32 products: at each SIMD level's matmul float32 row, every set of the thin-product
  options (``registry.GEMV_F32_FLAGS``: L2 prefetch of the next weight rows, the K split of the
  ``x @ W`` row stream) timed alternately on ``x @ W`` and ``x @ W.T`` with M = 1, 4, 16 and
  K = N = 4096 (``--quick``: M = 1, 16), at 1 thread and at ``--threads``; the fastest is kept if
  it beats what the host runs without a file by ``MARGIN`` (``thin_f32``).

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
TIE = MARGIN           # conv formulation limits this close to the fastest count as tied
KERNEL_MARGIN = 1.05   # a lower level's kernel runs every problem size of its op: it must win clearly
_NATIVE_LEVELS = ("avx512_core", "avx512_core_bf16", "avx512_core_amx")


class TuneError(Exception):
    """A usage error (unknown op/dtype, bad threads): the CLI prints it and exits with code 2."""


# ------------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class Problem:
    """One measured problem. GEMM: (m, n, k); conv: NCHW, (c, h, oc, kh) or (c, h, oc, kh, n, s):
    batch n (default 1), c -> oc channels, h x h plane, kh x kh kernel, stride s (default 1),
    padding kh // 2."""
    kind: str          # "gemm" or "conv"
    dims: tuple

    @property
    def conv(self) -> tuple:
        """(n, c, h, oc, kh, s, oh) of a conv problem (oh: the output plane's side)."""
        c, h, oc, kh = self.dims[:4]
        n, s = self.dims[4:6] if len(self.dims) > 4 else (1, 1)
        return n, c, h, oc, kh, s, (h + 2 * (kh // 2) - kh) // s + 1

    @property
    def flops(self) -> float:
        if self.kind == "gemm":
            m, n, k = self.dims
            return 2.0 * m * n * k
        n, c, h, oc, kh, s, oh = self.conv
        return 2.0 * n * c * oc * kh * kh * oh * oh

    @property
    def label(self) -> str:
        if self.kind == "gemm":
            return "x".join(map(str, self.dims))
        n, c, h, oc, kh, s, oh = self.conv
        return (f"mb{n}" if n > 1 else "") + f"ic{c}ih{h}oc{oc}kh{kh}" + (f"s{s}" if s > 1 else "")


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
    the blocking ``blk`` = (mc, kc, nc); ``check(blk)`` compares the result with numpy. ``nhwc``
    (conv): 0 the NCHW formulation, 2 NCHW tensors in the NHWC formulation (op_conv_desc.nhwc)."""

    def __init__(self, row, problem: Problem, threads: int, seed: int = 0, nhwc: int = 0):
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
            n, c, h, oc, kh, s, oh = problem.conv
            x = rng.uniform(-1, 1, (n, c, h, h)).astype(np.float32)
            w = rng.uniform(-1, 1, (oc, c, kh, kh)).astype(np.float32)
            if bf16:
                x, w = x.astype(BF16), w.astype(BF16)
            self.x, self.w = x, w
            d = ffi.new("op_conv_desc *")
            d.n, d.c, d.h, d.w = n, c, h, h
            d.oc, d.oh, d.ow = oc, oh, oh
            d.kh = d.kw = kh
            d.sh = d.sw = s
            d.dh = d.dw = 1
            d.pt = d.pl = kh // 2
            d.groups = 1
            d.nhwc = nhwc
            self.desc = d
            self._ref = _conv_ref(x.astype(np.float32), w.astype(np.float32), kh // 2, s)
            if row.symbol == "op_conv2d_bf16":
                self.c = np.empty((n, oc, oh, oh), BF16)
                fn = self.lib.op_conv2d_bf16
                args = (d, ffi.cast("const uint16_t *", x.ctypes.data),
                        ffi.cast("const uint16_t *", w.ctypes.data), ffi.NULL,
                        ffi.cast("void *", self.c.ctypes.data), 1, 0)
            else:  # float32 kernels (bfloat16 input widened while packing, weight as float32)
                self.c = np.empty((n, oc, oh, oh), np.float32)
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


def _conv_ref(x, w, pad, stride=1):
    """float32 NCHW conv by im2col and one matmul (numpy)."""
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    s = xp.strides
    win = np.lib.stride_tricks.as_strided(xp, (n, c, kh, kw, oh, ow),
                                          (s[0], s[1], s[2], s[3], s[2] * stride, s[3] * stride))
    cols = np.ascontiguousarray(win).reshape(n, c * kh * kw, oh * ow)
    return np.matmul(w.reshape(oc, -1), cols).reshape(n, oc, oh, ow)


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


def _file_choices(results, old=()) -> list[dict]:
    """The tuning file's ``choices``: one entry per (level, op, dtype) with the kinds this run
    measured, plus the kinds (and entries) of ``old`` (a valid file's choices) it did not."""
    out: dict[tuple, dict] = {}
    for ch in results:
        e = out.setdefault((ch.level, ch.op, ch.dtype), {"op": ch.op, "dtype": ch.dtype, "level": ch.level})
        e[ch.kind] = ch.chosen
        e.setdefault("detail", {})[ch.kind] = ch.detail
    for o in old:
        key = (o["level"], o["op"], o["dtype"])
        e = out.setdefault(key, {"op": o["op"], "dtype": o["dtype"], "level": o["level"]})
        for kind in ("conv_as_nhwc", "kernel_level", "thin_f32"):
            if kind in o and kind not in e:
                e[kind] = o[kind]
                if isinstance(o.get("detail"), dict) and kind in o["detail"]:
                    e.setdefault("detail", {})[kind] = o["detail"][kind]
    return list(out.values())


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


# ------------------------------------------------------------------------------------------------
# Choices: the conv formulation per problem class, the 256-bit kernel at the AVX-512 levels

# Per problem class of registry.CONV_NCHW_AS_NHWC, ResNet-50 layers (NCHW), largest output plane
# first: (c, h, oc, kh, n, s). "kxk" (any stride) is measured on the strided 3x3 layers, as
# "kxk_stride1" (the larger limit applies at stride 1) covers the others. The 1x1 stride-1 classes:
# "1x1_batch" measured at batch 8, "1x1_single" at batch 1.
CONV_CLASS_PROBLEMS = {
    "kxk": ((128, 56, 128, 3, 1, 2), (256, 28, 256, 3, 1, 2), (512, 14, 512, 3, 1, 2)),
    "kxk_stride1": ((64, 56, 64, 3, 1, 1), (128, 28, 128, 3, 1, 1), (256, 14, 256, 3, 1, 1),
                    (512, 7, 512, 3, 1, 1)),
    "1x1_batch": ((256, 56, 64, 1, 8, 1), (512, 28, 128, 1, 8, 1), (1024, 14, 256, 1, 8, 1),
                  (2048, 7, 512, 1, 8, 1)),
    "1x1_stride": ((256, 56, 512, 1, 1, 2), (512, 28, 1024, 1, 1, 2), (1024, 14, 2048, 1, 1, 2)),
    "1x1_single": ((1024, 14, 256, 1, 1, 1), (2048, 7, 512, 1, 1, 1), (512, 7, 2048, 1, 1, 1)),
}
YMM_OPS = ("matmul", "linear")   # where tune offers the 256-bit (avx2) kernel at an AVX-512 level


def conv_algo_problems(quick: bool) -> dict[str, list[Problem]]:
    """The problems of each conv class the NCHW-as-NHWC choice is measured on (``--quick``: without
    the 56x56 plane where a class has four)."""
    out = {}
    for cls, dims in CONV_CLASS_PROBLEMS.items():
        ps = [Problem("conv", d) for d in dims]
        out[cls] = ps[1:] if quick and len(ps) > 3 else ps
    return out


@dataclass
class ChoiceResult:
    """What ``tune`` chose for one (op, dtype, level) and one kind of choice ("conv_as_nhwc":
    {class: pixels}; "kernel_level": a level name), against what dispatch uses without a file."""
    op: str
    dtype: str
    level: str
    kind: str
    shipped: object
    chosen: object
    detail: dict = field(default_factory=dict)
    rejected: list = field(default_factory=list)


def _paired(ra, rb, blk_a, blk_b, min_time, rounds, pairs) -> tuple[float, float]:
    """Best seconds of two runners timed alternately ``pairs`` times (other load only ever slows a
    measurement down)."""
    ta = tb = math.inf
    for _ in range(pairs):
        ta = min(ta, ra.seconds(blk_a, min_time, rounds))
        tb = min(tb, rb.seconds(blk_b, min_time, rounds))
    return ta, tb


def as_nhwc_threshold(planes, t_nchw, t_nhwc, shipped: int) -> int:
    """The limit (largest output plane taking the NHWC formulation) among 0 and ``planes`` that
    minimises the summed log time over the measured planes; ``shipped`` unless that saves more
    than ``MARGIN`` (on one plane or spread over several). A time of ``math.inf`` (a wrong result)
    excludes that formulation there. Of limits within ``TIE`` of the least time, the one closest
    to ``shipped``."""
    def cost(lim):
        total = 0.0
        for p, a, b in zip(planes, t_nchw, t_nhwc):
            t = b if p <= lim else a
            if not math.isfinite(t):
                return math.inf
            total += math.log(t)
        return total
    cands = sorted({0, *planes})
    low = min(cost(c) for c in cands)
    if not low < cost(shipped) - math.log(MARGIN):
        return shipped
    # near-ties (within TIE): the limit closest to the shipped one (the least change)
    near = [c for c in cands if cost(c) <= low + math.log(TIE)]
    return min(near, key=lambda c: (abs(c - shipped), c))


def tune_conv_algo(row, blk, threads: int, quick: bool, advance=lambda: None,
                   describe=lambda text: None) -> ChoiceResult:
    """Measure the NCHW and the NCHW-as-NHWC formulation (op_conv_desc.nhwc 0 / 2) of conv
    ``row`` (its (level, dtype); blocking ``blk``) on each class's problems and pick each class's
    limit (``as_nhwc_threshold``), starting from the shipped ``CONV_NCHW_AS_NHWC`` rule."""
    from .dispatch import registry
    shipped, _ = registry.conv_as_nhwc_limits(row.level, row.dtype, uarch=_host().uarch)
    min_time, rounds, pairs = (0.02, 2, 3) if quick else (0.03, 3, 4)
    res = ChoiceResult("conv2d", row.dtype, row.level, "conv_as_nhwc",
                       {c: int(shipped.get(c, 0)) for c in CONV_CLASS_PROBLEMS}, {})
    describe(f"conv2d {row.dtype} {row.level}: NCHW or NHWC formulation")
    for cls, probs in conv_algo_problems(quick).items():
        planes, ta, tb, ratios = [], [], [], {}
        for p in sorted(probs, key=lambda q: q.conv[6]):
            pixels = p.conv[6] ** 2
            a, b = Runner(row, p, threads, nhwc=0), Runner(row, p, threads, nhwc=2)
            ok = []
            for r in (a, b):
                err = r.check(blk)
                ok.append(err <= r.tolerance())
                if not ok[-1]:
                    res.rejected.append({"problem": p.label, "nhwc": r.desc.nhwc, "rel_err": err})
            t = _paired(a, b, blk, blk, min_time, rounds, pairs) if all(ok) else (math.inf, math.inf)
            planes.append(pixels)
            ta.append(t[0] if ok[0] else math.inf)
            tb.append(t[1] if ok[1] else math.inf)
            ratios[p.label] = round(ta[-1] / tb[-1], 3) if math.isfinite(ta[-1] / tb[-1]) else None
            advance()
        res.chosen[cls] = as_nhwc_threshold(planes, ta, tb, res.shipped[cls])
        res.detail[cls] = ratios   # NCHW time / NHWC-formulation time per problem
    return res


def ymm_alternative(row, available):
    """The avx2 (256-bit) row computing what ``row`` computes at an AVX-512 level (float32 and
    widened bfloat16 GEMM rows of ``YMM_OPS``), or None."""
    from .dispatch import REGISTRY
    if row.level not in _NATIVE_LEVELS or row.elem_bytes != 4 or row.op not in YMM_OPS \
            or "avx2" not in available:
        return None
    return next((r for r in REGISTRY if (r.level, r.op, r.dtype, r.algorithm)
                 == ("avx2", row.op, row.dtype, row.algorithm)), None)


def tune_kernel_level(row, blk, alt, alt_blk, threads: int, quick: bool, advance=lambda: None,
                      describe=lambda text: None) -> ChoiceResult:
    """Time ``row`` (blocking ``blk``) and the lower-level ``alt`` (``alt_blk``) alternately on
    ``row``'s problems; ``alt``'s level is chosen only if it is faster by ``KERNEL_MARGIN``."""
    describe(f"{row.op} {row.dtype} {row.level}: or the {alt.level} kernel")
    probs = problems(row.op, row.level, quick)
    min_time, rounds, pairs = (0.02, 3, 2) if quick else (0.03, 5, CONFIRM_ROUNDS)
    res = ChoiceResult(row.op, row.dtype, row.level, "kernel_level", row.level, row.level)
    ra = [Runner(row, p, threads) for p in probs]
    rb = [Runner(alt, p, threads) for p in probs]
    for r in rb:
        err = r.check(alt_blk)
        if not err <= r.tolerance():
            res.rejected.append({"problem": r.problem.label, "kernel": alt.name, "rel_err": err})
            advance()
            return res
    ga = gb = 0.0
    for _ in range(pairs):
        ga = max(ga, _geo(ra, blk, min_time, rounds))
        gb = max(gb, _geo(rb, alt_blk, min_time, rounds))
    res.detail = {row.level: round(ga, 2), alt.level: round(gb, 2)}   # GFLOP/s
    if gb > ga * KERNEL_MARGIN:
        res.chosen = alt.level
    advance()
    return res


THIN_M = (1, 4, 16)       # the thin products tune_thin_f32 measures (K = N = THIN_KN)
THIN_KN = 4096


def thin_f32_problems(quick: bool) -> list[Problem]:
    """(M, N, K) of the thin products the ``thin_f32`` choice is measured on."""
    ms = (THIN_M[0], THIN_M[-1]) if quick else THIN_M
    return [Problem("gemm", (m, THIN_KN, THIN_KN)) for m in ms]


def thin_f32_candidates() -> list[tuple[str, ...]]:
    """Every set of thin-product options (``registry.GEMV_F32_FLAGS``), the empty one first."""
    import itertools
    from .dispatch.registry import GEMV_F32_FLAGS
    names = tuple(GEMV_F32_FLAGS)
    return [c for n in range(len(names) + 1) for c in itertools.combinations(names, n)]


def tune_thin_f32(row, threads: int, quick: bool, advance=lambda: None,
                  describe=lambda text: None) -> ChoiceResult:
    """Time every ``thin_f32_candidates`` set on ``row``'s level (a matmul float32 row) alternately:
    ``x @ W`` (row-major W) and ``x @ W.T`` (the linear layout) on ``thin_f32_problems``, at 1
    thread and at ``threads``. The fastest set (geometric mean of GFLOP/s over all of those) is
    chosen if it beats the shipped one by ``MARGIN``. The options are module-wide C state, the
    same at every thread count, so both counts decide: on the Intel AMX VM the next-block prefetch
    measured even at 2 threads (memory-bound there) and 10-40% faster at 1. Set per candidate,
    restored to the shipped ones after."""
    from .dispatch import REGISTRY, registry
    describe(f"thin float32 products {row.level}")
    shipped = registry.gemv_f32_options(row.level, uarch=_host().uarch)[0]
    res = ChoiceResult(row.op, row.dtype, row.level, "thin_f32", list(shipped), list(shipped))
    lin = next(r for r in REGISTRY if (r.level, r.op, r.dtype, r.algorithm)
               == (row.level, "linear", "float32", row.algorithm))
    probs = thin_f32_problems(quick)
    runners = [Runner(r, p, t) for t in sorted({1, threads}) for r in (row, lin) for p in probs]
    lib = runners[0].lib
    cands = thin_f32_candidates()
    min_time, rounds, pairs = (0.02, 2, 2) if quick else (0.03, 3, CONFIRM_ROUNDS)
    blk = (row.mr, row.k_align, row.nr)  # the thin paths take no blocking
    best = dict.fromkeys(cands, 0.0)
    try:
        for c in cands:
            lib.op_gemv_f32_options(sum(registry.GEMV_F32_FLAGS[o] for o in c))
            for r in runners:
                err = r.check(blk)
                if not err <= r.tolerance():
                    res.rejected.append({"problem": f"{r.problem.label} {r.row.op} {'+'.join(c) or 'none'}",
                                         "kernel": r.row.name, "rel_err": err})
                    best.pop(c)
                    break
        for _ in range(pairs):
            for c in best:
                lib.op_gemv_f32_options(sum(registry.GEMV_F32_FLAGS[o] for o in c))
                best[c] = max(best[c], _geo(runners, blk, min_time, rounds))
    finally:
        lib.op_gemv_f32_options(registry.gemv_f32_flags(row.level))  # what dispatch runs
    res.detail = {"+".join(c) or "none": round(g, 2) for c, g in best.items()}  # GFLOP/s
    if best:
        top = max(best, key=best.get)
        base = best.get(tuple(o for o in registry.GEMV_F32_FLAGS if o in shipped), 0.0)
        if best[top] > base * MARGIN:
            res.chosen = list(top)
    advance()
    return res


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
        progress: bool = True, out=None, choices: bool = True) -> dict:
    """Tune the selected rows (their blocking, then, with ``choices``, the conv rows' NCHW-as-NHWC
    limits, the 256-bit kernel of the AVX-512 GEMM rows and the thin float32 product options),
    print the tables, write the tuning
    file (merged with the rows and choices of a valid existing file for this host that were not
    re-measured). Returns the JSON document (also written to ``json_path``)."""
    import datetime as _dt

    import onepath
    from .bench.cli import print_table, progress_bar
    from .bench.core import peak_f32
    from .dispatch import tuning
    out = out or sys.stdout
    ops = tuple(o.lower() for o in ops) if ops else OPS
    dtypes = tuple(d.lower() for d in dtypes) if dtypes else DTYPES
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
        levels = [lv.lower() if isinstance(lv, str) else lv for lv in levels]  # names match in any case
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
    avail = set(onepath.available_isas())
    ymm = {r: ymm_alternative(r, avail) for r in rows} if choices else {}
    ymm = {r: alt for r, alt in ymm.items() if alt is not None}
    convs = [r for r in rows if r.op == "conv2d"] if choices else []
    thins = [r for r in rows if (r.op, r.dtype) == ("matmul", "float32") and r.level != "generic"] \
        if choices else []
    total = len({r.level for r in rows}) + sum(expected_candidates(r, quick) for r in rows) \
        + len(ymm) + len(thins) + len(convs) * sum(len(v) for v in conv_algo_problems(quick).values())
    choice_results: list[ChoiceResult] = []
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
        # the choices, each measured with the blocking this run chose (else the shipped one)
        chosen = {(res.level, res.op, res.dtype): res.chosen for res in results}

        def blk_of(row):
            got = chosen.get((row.level, row.op, row.dtype))
            if got is None:
                from .dispatch import registry
                b = registry._blocked(row, cpu.uarch, registry._cpu_key(cpu), False)
                got = (b.mc, b.kc, b.nc)
            return got
        for r, alt in ymm.items():
            choice_results.append(tune_kernel_level(r, blk_of(r), alt, blk_of(alt), threads, quick,
                                                    advance, describe))
        for r in thins:
            choice_results.append(tune_thin_f32(r, threads, quick, advance, describe))
        for r in convs:
            choice_results.append(tune_conv_algo(r, blk_of(r), threads, quick, advance, describe))
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
          "x start: chosen / starting blocking.", file=out)
    if choice_results:
        cells = []
        for ch in choice_results:
            if ch.kind == "kernel_level":
                measured = ", ".join(f"{lv} {g:.1f} GFLOP/s" for lv, g in ch.detail.items())
                cells.append([f"{ch.op} {ch.dtype}", ch.level, "kernel level", ch.shipped, ch.chosen,
                              measured or "-"])
                continue
            if ch.kind == "thin_f32":
                measured = ", ".join(f"{c} {g:.1f}" for c, g in ch.detail.items())
                cells.append([f"{ch.op} {ch.dtype}", ch.level, "thin options",
                              "+".join(ch.shipped) or "none", "+".join(ch.chosen) or "none",
                              (measured + " GFLOP/s") if measured else "-"])
                continue
            for cls, ratios in ch.detail.items():
                measured = " ".join(f"{lab}:{'-' if x is None else f'{x:.2f}'}" for lab, x in ratios.items())
                cells.append([f"{ch.op} {ch.dtype}", ch.level, f"NHWC form {cls}", str(ch.shipped[cls]),
                              str(ch.chosen[cls]), measured])
        print_table("tune: choices (kernel level: GFLOP/s of each; thin options: GFLOP/s of each set, "
                    "M <= 16; NHWC form: the largest output plane (OH*OW) that takes it, measured NCHW "
                    "time / NHWC-form time per problem)",
                    ["group", "level", "choice", "shipped", "chosen", "measured"], cells, file=out)
        for ch in choice_results:
            for rj in ch.rejected:
                print(f"! {ch.op} {ch.dtype} {ch.level} {ch.kind}: a wrong result on {rj['problem']} "
                      f"(rel err {rj['rel_err']:.2e}); not chosen", file=out)
    print(f"{elapsed:.0f} s.", file=out)

    file_rows = [res.file_row() for res in results]
    file_choices = _file_choices(choice_results)
    written = None
    if write:
        keep = []
        try:  # keep the rows and choices of a valid file for this host that this run did not measure
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            tuning.parse(old, cpu)
            done = {(r["level"], r["op"], r["dtype"]) for r in file_rows}
            keep = [r for r in old["rows"] if (r["level"], r["op"], r["dtype"]) not in done]
            file_choices = _file_choices(choice_results, old.get("choices", []))
        except (OSError, ValueError):
            pass
        doc = tuning.document(cpu, keep + file_rows, threads=threads, quick=quick, choices=file_choices)
        written = tuning.write(path, doc)
        print(f"wrote {written} ({len(keep + file_rows)} rows, {len(file_choices)} choices); the next "
              f"process uses it (ONEPATH_TUNING=off ignores it)", file=out)
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
        "choices": [{"op": ch.op, "dtype": ch.dtype, "level": ch.level, "kind": ch.kind,
                     "shipped": ch.shipped, "chosen": ch.chosen, "detail": ch.detail,
                     "rejected": ch.rejected} for ch in choice_results],
    }
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {json_path}", file=sys.stderr)
    return report
