"""Sweep of buffer placements for one conv case (issue 8, "place" slice): the input at a random 16-byte
offset modulo 4 KiB and the heap shifted by a random held malloc per placement (moving the output and
onepath's own buffers), onepath timed (best of 2 x 20 calls) and optionally torch in the same round.

Usage (repository root, under the bench lock):
    flock -x /work/bench.lock python scripts/place_sweep.py DESC [--layout NCHW] [--n 24] [--torch] [--seed 1]
Prints one line per placement (x and y addresses mod 4 KiB, GFLOP/s) and min / median / max.
The output comes from one fixed buffer at a random offset per placement (SWEEP_Y=0: from the heap).
SWEEP_MODES=base,packed,joint,nchw times the shipped route against variants alternated in one process
(best of SWEEP_REPS): "packed" the NCHW 1x1 in-place-B option off (joint off too), "joint" the
in-place-B option off (the joint NCHW 1x1 GEMM takes the problem), "nchw" the zen4 NCHW-as-NHWC
limits for k x k set to 0 (the NCHW implicit GEMM). SWEEP_THREADS=1 prints each thread's CPU ticks.

Finding (Zen 4 VM, 2026-12-01): the two speeds of issue 8's "position effect" did not follow the
buffers' addresses mod 4 KiB here: with the input, output and the GEMM packing buffer swept over
16-byte offsets in one process the rate stayed within a few percent, while whole runs switched by
the minute between about 193 and 140 GFLOP/s (res2a_branch2a, batch 8, 2 threads), in step with
random reads over 16 MiB taking ~5 instead of ~3 ns per element (the shared L3 degraded); 1 thread
was unaffected. torch's rate moved the other way (155 -> 172). (It replaces the earlier
scripts/position_probe.py, whose placement explanation this sweep did not confirm.)
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("desc")
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    from onepath.bench.cli import steady_malloc
    steady_malloc()
    import onepath
    from onepath.bench import benchdnn
    onepath.set_num_threads(a.threads)
    d = benchdnn.parse(a.desc)
    rng = np.random.default_rng(a.seed)
    x0 = rng.standard_normal((d.mb, d.ic, d.ih, d.iw), dtype=np.float32)
    w = (rng.standard_normal((d.oc, d.ic // d.g, d.kh, d.kw), dtype=np.float32) / 8).astype(np.float32)
    xl = np.ascontiguousarray(x0.transpose(0, 2, 3, 1)) if a.layout == "NHWC" else x0
    big = np.empty(xl.nbytes + 8192, np.uint8)
    base = (-big.ctypes.data) % 4096
    kw = dict(stride=(d.sh, d.sw), padding=d.padding, dilation=d.dilation, groups=d.g, layout=a.layout)
    tconv = None
    if a.torch:
        import torch
        torch.set_num_threads(a.threads)
        tx = torch.from_numpy(x0)
        tw = torch.from_numpy(w)
        if a.layout == "NHWC":
            tx = tx.contiguous(memory_format=torch.channels_last)
            tw = tw.contiguous(memory_format=torch.channels_last)
        (pt, pb), (pl, pr) = d.padding
        tconv = lambda: torch.nn.functional.conv2d(tx, tw, None, stride=(d.sh, d.sw), padding=(pt, pl))  # noqa: E731
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    held = []
    ref = None
    # the output at a chosen offset mod 4 KiB: conv's np.empty of the output shape served from ybig
    import types
    import onepath.ops.conv as opc
    ybytes = d.mb * d.oc * d.oh * d.ow * 4
    ybig = np.empty(ybytes + 8192, np.uint8)
    ybase = (-ybig.ctypes.data) % 4096
    yoff = [ybase]

    def _empty(shape, dtype=float, *args, **kw2):
        if int(np.prod(shape)) * np.dtype(dtype).itemsize == ybytes and not args and not kw2:
            return ybig[yoff[0]:yoff[0] + ybytes].view(dtype).reshape(shape)
        return np.empty(shape, dtype, *args, **kw2)
    if os.environ.get("SWEEP_Y", "1") == "1":
        opc.np = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
        opc.np.empty = _empty

    def rate(fn):
        fn()
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            for _ in range(a.calls):
                fn()
            best = min(best, (time.perf_counter() - t0) / a.calls)
        return d.flops / best / 1e9

    rs, ts = [], []
    from onepath import kernels as _k
    lib = _k.load("avx512_core").lib if hasattr(_k, "load") else None
    f0 = lib.op_conv_f32_options(-1) if lib is not None else 0

    def _thread_times():
        out = {}
        for t in os.listdir("/proc/self/task"):
            try:
                st = open(f"/proc/self/task/{t}/stat").read()
            except OSError:
                continue
            name = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            out[int(t)] = (name, int(f[11]) + int(f[12]), int(f[36]))
        return out
    prev = _thread_times()
    allr = {}
    for k in range(a.n):
        off = base + 16 * int(rng.integers(0, 256))
        x = big[off:off + xl.nbytes].view(np.float32).reshape(xl.shape)
        x[...] = xl
        held.append(libc.malloc(int(rng.integers(1, 4096)) * 16))
        yoff[0] = ybase + 16 * int(rng.integers(0, 256))
        y = onepath.conv2d(x, w, **kw)
        if ref is None:
            ref = y.copy()
        elif not np.array_equal(ref, y):
            print("RESULT CHANGED", flush=True)
        ya = y.ctypes.data
        del y
        modes = os.environ.get("SWEEP_MODES")   # e.g. "base,joint": alternated in one process, best of reps
        if modes:
            ms = modes.split(",")
            best = {m: 0.0 for m in ms}
            tb = 0.0
            for rep in range(int(os.environ.get("SWEEP_REPS", "3"))):
                for m in ms:
                    if m in ("packed", "joint"):   # the NCHW 1x1 in-place-B bit off (joint bit as shipped / off)
                        lib.op_conv_f32_options(f0 & ~256 & (~0 if m == "joint" else ~512))
                    if m == "nchw":   # the NCHW GEMM instead of the NHWC formulation (zen4 kxk_stride1 off)
                        from onepath.dispatch import registry as _reg
                        lim = _reg.CONV_NCHW_AS_NHWC[("zen4", "avx512_core")]
                        old = dict(lim)
                        lim["kxk_stride1"] = 0
                        lim["kxk"] = 0
                        _reg.clear_caches()
                    best[m] = max(best[m], rate(lambda: onepath.conv2d(x, w, **kw)))
                    if m == "nchw":
                        lim.update(old)
                        _reg.clear_caches()
                    lib.op_conv_f32_options(f0)
                if tconv is not None:
                    time.sleep(0.05)
                    tb = max(tb, rate(tconv))
            line = f"{k:3d} x%4K {x.ctypes.data % 4096:4d} y%4K {ya % 4096:4d} |" + "".join(
                f" {m} {best[m]:5.0f}" for m in ms)
            if tconv is not None:
                line += f" torch {tb:5.0f} |" + "".join(f" {best[m] / tb:4.2f}" for m in ms)
                ts.append(tb)
            allr.setdefault("_", []).append(best)
            print(line, flush=True)
            if os.environ.get("SWEEP_THREADS"):
                cur = _thread_times()
                print("    threads:", " ".join(f"{tid}:{n}:{cur[tid][1] - prev.get(tid, (0, 0, 0))[1]}@{cur[tid][2]}"
                                              for tid, n in sorted(((t, v[0]) for t, v in cur.items()))
                                              if cur[tid][1] - prev.get(tid, (0, 0, 0))[1] > 0), flush=True)
                prev.clear()
                prev.update(cur)
            continue
        r = rate(lambda: onepath.conv2d(x, w, **kw))
        rs.append(r)
        line = f"{k:3d} x%4K {x.ctypes.data % 4096:4d} y%4K {ya % 4096:4d}  onepath {r:6.1f}"
        if tconv is not None:
            time.sleep(0.05)
            t = rate(tconv)
            ts.append(t)
            line += f"  torch {t:6.1f}  x {r / t:4.2f}"
        print(line, flush=True)
    if allr:
        for m in allr["_"][0]:
            v = [b[m] for b in allr["_"]]
            line = f"{m:6s} min {min(v):6.1f} med {float(np.median(v)):6.1f} max {max(v):6.1f}"
            if ts:
                rr = np.array(v) / np.array(ts)
                line += f"  x torch min {rr.min():.2f} med {float(np.median(rr)):.2f}"
            print(line)
        if ts:
            print(f"torch  min {min(ts):6.1f} med {float(np.median(ts)):6.1f} max {max(ts):6.1f}")
    if not rs:
        return
    q = lambda v: f"min {min(v):6.1f} med {float(np.median(v)):6.1f} max {max(v):6.1f}"  # noqa: E731
    print("onepath", q(rs))
    if ts:
        print("torch  ", q(ts), " ratio med", f"{float(np.median(np.array(rs) / np.array(ts))):.2f}",
              "min", f"{min(np.array(rs) / np.array(ts)):.2f}")


if __name__ == "__main__":
    main()
