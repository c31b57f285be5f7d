"""Golden results of the reproducible mode, across levels, thread counts and CPU vendors.

``python -m onepath golden --write FILE`` computes a fixed set of problems (``problems()``: matmul,
linear with each activation, conv2d / conv1d of every algorithm in both layouts; float32, bfloat16
and mixed; odd sizes and K tails) in reproducible mode and stores one SHA-256 per result with the
host's fingerprint. ``--check FILE`` recomputes them at every ISA level this host runs and every
thread count 1..cpus and reports each mismatch by problem, level and thread count. A file written on
an Intel host checks on AMD and the reverse: that is the reproducible mode's promise.

Inputs come from integer arithmetic defined here (a SplitMix64 hash of the element index and a
seed, Steele, Lea & Flood, OOPSLA 2014), never from numpy's random streams, whose algorithms may
change between numpy versions. Values are m * 2^e with a small integer m (12 bits for float32, 8 for
bfloat16, so both are exact) and e spread over a few octaves, plus about 1 in 16 subnormal values,
so the FMA chains round often and a flush-to-zero anywhere changes the hash.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass, field

import numpy as np

from .dtypes import BF16

FORMAT = 1
_F32 = np.dtype(np.float32)
_ACTS = (None, "relu", "gelu", "gelu_tanh", "silu")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix(idx: np.ndarray, seed: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = idx.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def values(shape, dtype, seed: int) -> np.ndarray:
    """A C-contiguous array of ``shape`` (float32 or bfloat16) from integer arithmetic only:
    element i is m * 2^e, m and e taken from SplitMix64(i, seed); about 1 in 16 is subnormal."""
    n = int(np.prod(shape)) if len(shape) else 1
    z = _splitmix(np.arange(n, dtype=np.uint64), seed)
    bits = 8 if np.dtype(dtype) == BF16 else 12
    m = (z & np.uint64((1 << bits) - 1)).astype(np.int64) - (1 << (bits - 1))
    e = ((z >> np.uint64(16)) % np.uint64(6)).astype(np.int64) - (bits + 2)
    sub = ((z >> np.uint64(24)) % np.uint64(16)) == 0
    e = np.where(sub, -126 - bits, e)  # |m| 2^(-126-bits) < 2^-126: subnormal, exact in both types
    v = np.ldexp(m.astype(np.float64), e).astype(np.float32)
    return v.astype(dtype).reshape(shape)


@dataclass
class Problem:
    """One golden problem: ``name`` (unique), ``op`` ("matmul", "linear", "conv2d", "conv1d"),
    operand ``shapes`` and ``dtypes``, and keyword arguments ``kw`` of the op."""
    name: str
    op: str
    shapes: tuple
    dtypes: tuple
    kw: dict = field(default_factory=dict)

    def inputs(self):
        return [_all_bf16() if s == "all_bf16" else values(s, d, 1000 * i + len(self.name))
                for i, (s, d) in enumerate(zip(self.shapes, self.dtypes))]

    def run(self):
        import onepath
        args = self.inputs()
        if self.op == "matmul":
            return onepath.matmul(*args, **self.kw)
        if self.op == "linear":
            return onepath.linear(*args, **self.kw)
        return getattr(onepath, self.op)(*args, **self.kw)


def _dn(d) -> str:
    return "bf16" if np.dtype(d) == BF16 else "f32"


def problems() -> list[Problem]:
    """The fixed problem set (215 problems; its order and content define the golden file)."""
    out: list[Problem] = []
    f32, bf = _F32, BF16
    pairs = ((f32, f32), (bf, bf), (bf, f32))
    mm = ((1, 1, 1), (1, 7, 1), (3, 5, 7), (13, 17, 19), (14, 32, 32), (15, 33, 31), (6, 16, 16),
          (29, 300, 65), (64, 64, 64), (100, 257, 33), (1, 1000, 5), (5, 1000, 1), (33, 1, 47),
          (2, 2049, 3), (50, 513, 129), (4, 8, 8), (7, 128, 96), (16, 255, 17), (3, 64, 200),
          (41, 97, 43))
    for m, k, n in mm:
        for da, db in pairs:
            out.append(Problem(f"matmul {m}x{k}x{n} {_dn(da)}x{_dn(db)}", "matmul", ((m, k), (k, n)), (da, db)))
    batched = (((3, 5, 7), (7, 9)), ((2, 1, 4, 6), (3, 6, 5)), ((9,), (9, 4)), ((4, 9), (9,)),
               ((300,), (300,)))
    for sa, sb in batched:
        for da, db in pairs[:2]:
            out.append(Problem(f"matmul {sa}@{sb} {_dn(da)}", "matmul", (sa, sb), (da, db)))
    for dt in (f32, bf):
        out.append(Problem(f"matmul {_dn(dt)} ->f32 (dtype=float32)", "matmul", ((17, 40), (40, 9)), (dt, dt),
                           {"dtype": np.float32}))
    lin = ((1, 16, 8), (7, 33, 17), (32, 100, 50), (5, 257, 31), (20, 64, 48))
    for m, k, n in lin:
        for dt in (f32, bf):
            for act in _ACTS:
                out.append(Problem(f"linear {m}x{k}->{n} {_dn(dt)} bias {act}", "linear",
                                   ((m, k), (n, k), (n,)), (dt, dt, f32), {"activation": act}))
            out.append(Problem(f"linear {m}x{k}->{n} {_dn(dt)} nobias", "linear", ((m, k), (n, k)), (dt, dt)))
    # conv: (n, c, h, w, oc, kh, kw, stride, padding, dilation, groups), algorithms of the default
    # mode named: 1x1_gemm, implicit_gemm, grouped, depthwise
    convs = (
        ("1x1", (2, 8, 7, 7, 16, 1, 1, 1, 0, 1, 1)),
        ("1x1 s2", (1, 16, 9, 9, 8, 1, 1, 2, 0, 1, 1)),
        ("3x3 p1", (1, 6, 9, 9, 10, 3, 3, 1, 1, 1, 1)),
        ("3x3 s2 p1", (2, 5, 11, 10, 7, 3, 3, 2, 1, 1, 1)),
        ("3x3 d2", (1, 4, 12, 12, 6, 3, 3, 1, 2, 2, 1)),
        ("5x5 same", (1, 3, 8, 8, 5, 5, 5, 1, "same", 1, 1)),
        ("7x7 s2 p3", (1, 3, 16, 16, 8, 7, 7, 2, 3, 1, 1)),
        ("3x1 asym", (1, 4, 7, 9, 6, 3, 1, 1, ((1, 0), (0, 2)), 1, 1)),
        ("grouped g2", (1, 8, 8, 8, 12, 3, 3, 1, 1, 1, 2)),
        ("grouped g4 s2", (2, 16, 9, 9, 16, 3, 3, 2, 1, 1, 4)),
        ("depthwise 3x3", (1, 12, 10, 10, 12, 3, 3, 1, 1, 1, 12)),
        ("depthwise 3x3 s2", (2, 9, 11, 11, 9, 3, 3, 2, 1, 1, 9)),
        ("depthwise 5x5 x2", (1, 4, 9, 9, 8, 5, 5, 1, 2, 1, 4)),
        ("large K", (1, 64, 6, 6, 20, 3, 3, 1, 1, 1, 1)),
    )
    i = 0
    for label, (n, c, h, w, oc, kh, kw, st, pad, dil, g) in convs:
        for layout in ("NCHW", "NHWC"):
            for dt in (f32, bf):
                act = _ACTS[i % len(_ACTS)]
                i += 1
                xs = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
                out.append(Problem(f"conv2d {label} {layout} {_dn(dt)} {act}", "conv2d",
                                   (xs, (oc, c // g, kh, kw), (oc,)), (dt, dt, f32),
                                   {"stride": st, "padding": pad, "dilation": dil, "groups": g,
                                    "layout": layout, "activation": act}))
    c1 = (("k3", (2, 6, 20, 8, 3, 1, 1, 1)), ("k5 s2 g2", (1, 8, 31, 6, 5, 2, 2, 2)),
          ("dw k3", (1, 7, 15, 7, 3, 1, 1, 7)))
    for label, (n, c, l, oc, k, st, pad, g) in c1:
        for layout in ("NCL", "NLC"):
            for dt in (f32, bf):
                xs = (n, c, l) if layout == "NCL" else (n, l, c)
                out.append(Problem(f"conv1d {label} {layout} {_dn(dt)}", "conv1d", (xs, (oc, c // g, k)), (dt, dt),
                                   {"stride": st, "padding": pad, "groups": g, "layout": layout}))
    # the default mode's documented differences (README): every finite bfloat16 bit pattern,
    # subnormals included (VDPBF16PS and AMX flush them), and short bfloat16 reductions whose
    # rounding points differ between VDPBF16PS (pairs) and AMX (tiles) in the default mode
    out.append(Problem("bf16 every finite pattern x 1", "matmul", ("all_bf16", (1, 1)), (bf, bf)))
    out.append(Problem("bf16 every finite pattern x w ->f32", "matmul", ("all_bf16", (1, 3)), (bf, bf),
                       {"dtype": np.float32}))
    # large enough that the kernels split them over threads (the driver gives a thread >= 4 MFLOP)
    for dt in (f32, bf):
        out.append(Problem(f"matmul 200x300x260 {_dn(dt)} (threaded)", "matmul", ((200, 300), (300, 260)), (dt, dt)))
        out.append(Problem(f"linear 128x384->200 {_dn(dt)} gelu (threaded)", "linear",
                           ((128, 384), (200, 384), (200,)), (dt, dt, f32), {"activation": "gelu"}))
        out.append(Problem(f"conv2d 3x3 c32 oc64 16x16 NHWC {_dn(dt)} silu (threaded)", "conv2d",
                           ((2, 16, 16, 32), (64, 32, 3, 3), (64,)), (dt, dt, f32),
                           {"padding": 1, "layout": "NHWC", "activation": "silu"}))
    for k in (2, 3, 4, 31, 32, 33, 64):
        out.append(Problem(f"bf16 rounding points K={k}", "matmul", ((8, k), (k, 8)), (bf, bf),
                           {"dtype": np.float32}))
    return out


def _all_bf16() -> np.ndarray:
    """Every finite bfloat16 bit pattern (65,280 values) as a column."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    finite = (bits & 0x7F80) != 0x7F80
    return bits[finite].astype(np.uint16).view(BF16).reshape(-1, 1)


def digest(arr: np.ndarray) -> str:
    """SHA-256 of a result: its dtype, shape and C-order bytes."""
    a = np.ascontiguousarray(arr)
    h = hashlib.sha256()
    h.update(f"{a.dtype.name}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def compute(probs=None) -> dict[str, str]:
    """name -> SHA-256 of every problem, computed in reproducible mode at the level and thread
    count in force."""
    import onepath
    out = {}
    with onepath.reproducible():
        for p in probs if probs is not None else problems():
            out[p.name] = digest(p.run())
    return out


def host_fingerprint() -> dict:
    """Who wrote a golden file: CPU vendor, brand, uarch, family/model, levels; versions."""
    import onepath
    from .dispatch import probe
    cpu = probe()
    return {"vendor": cpu.vendor, "brand": cpu.brand, "uarch": cpu.uarch, "family": cpu.family,
            "model": cpu.model, "levels": list(cpu.levels), "isa": onepath.isa(),
            "threads": onepath.get_num_threads(), "onepath_version": onepath.__version__,
            "numpy_version": np.__version__, "python": sys.version.split()[0],
            "machine": platform.machine()}


def write(path: str) -> dict:
    """Compute every problem (level and threads in force) and write the golden JSON to ``path``."""
    doc = {"format": FORMAT, "mode": "reproducible", "written_by": host_fingerprint(),
           "problems": [{"name": k, "sha256": v} for k, v in compute().items()]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return doc


def read(path: str) -> dict:
    """Load a golden file. Raises ValueError if it is not one (not JSON, wrong format number, no
    problems, or a problem entry without a string "name" and "sha256")."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)  # json.JSONDecodeError is a ValueError
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("problems"), list):
        raise ValueError(f"{path}: not a onepath golden file of format {FORMAT}")
    for i, p in enumerate(doc["problems"]):
        if not (isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("sha256"), str)):
            raise ValueError(f"{path}: problems[{i}] is not an object with string \"name\" and \"sha256\"")
    return doc


def check(path: str, levels=None, threads=None, progress=None) -> list[dict]:
    """Recompute the golden file's problems at each level (default: every level this host runs) and
    thread count (default 1..cpus); returns the mismatches, each {"problem", "level", "threads",
    "expected", "got"} (got None: a problem the file names that this version does not define;
    expected None: a problem this version defines that the file lacks)."""
    import onepath
    doc = read(path)
    want = {p["name"]: p["sha256"] for p in doc["problems"]}
    known = {p.name: p for p in problems()}
    probs = [known[n] for n in want if n in known]
    levels = list(levels) if levels else list(onepath.available_isas())
    if threads is None:
        threads = range(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) + 1)
    bad = [{"problem": n, "level": None, "threads": None, "expected": h, "got": None}
           for n, h in want.items() if n not in known]
    # problems this onepath defines that the file lacks (a cut-down or empty file checks nothing)
    bad += [{"problem": n, "level": None, "threads": None, "expected": None, "got": "missing"}
            for n in known if n not in want]
    saved = onepath.get_num_threads()
    try:
        for level in levels:
            for t in threads:
                onepath.set_num_threads(t)
                with onepath.max_isa(level):
                    got = compute(probs)
                for n, h in got.items():
                    if h != want[n]:
                        bad.append({"problem": n, "level": level, "threads": t, "expected": want[n], "got": h})
                if progress:
                    progress(level, t)
    finally:
        onepath.set_num_threads(saved)
    return bad


def main(write_path: str | None, check_path: str | None, levels=None, threads=None) -> int:
    """The ``golden`` command: 0 on success, 1 on mismatches, 2 on a bad file."""
    if write_path:
        doc = write(write_path)
        fp = doc["written_by"]
        print(f"wrote {len(doc['problems'])} reproducible-mode results to {write_path} "
              f"({fp['vendor']} {fp['uarch']}, level {fp['isa']}, {fp['threads']} threads)")
        return 0
    try:
        doc = read(check_path)
    except (OSError, ValueError) as exc:
        print(f"onepath: error: {exc}", file=sys.stderr)
        return 2
    fp = doc.get("written_by", {})
    done = []
    bad = check(check_path, levels, threads, progress=lambda lv, t: done.append((lv, t)))
    print(f"{check_path}: {len(doc['problems'])} problems written on {fp.get('vendor')} {fp.get('uarch')} "
          f"({fp.get('brand')}); checked at " + ", ".join(f"{lv}/{t}t" for lv, t in done))
    for b in bad:
        where = ("not defined by this onepath" if b["got"] is None
                 else "missing from the file" if b["expected"] is None
                 else f"level {b['level']} threads {b['threads']}")
        print(f"  MISMATCH {b['problem']}: {where}")
    print("all match" if not bad else f"{len(bad)} mismatches")
    return 1 if bad else 0
