"""Probe for the conv "position effect" (issue 8): does one conv call run at two speeds depending on
where the heap puts its buffers?

Usage (from the repository root, under the bench lock):
    flock -x /work/bench.lock python scripts/position_probe.py [DESC] [--dtype float32] [--layout NCHW]
        [--rounds 12] [--threads 2] [--torch]

It builds one conv case as the bench does (``conv_suite.conv_case``, glibc malloc pinned by
``steady_malloc``), then times ``onepath.conv2d`` in rounds of 40 calls (best of two per round,
GFLOP/s). Between rounds it keeps a small malloc'd block alive (48 KiB or about 1 KiB, alternately),
which moves where later per-call allocations land and changes nothing else. ``--torch`` also times
torch's conv2d in each round (after a 0.12 s settle, as the bench does).

What it showed on Zen 4 (2 threads, res2a_branch2a mb8ic64ih56oc64oh56kh1, float32 NCHW): the rate
sits at about 195 or about 140 GFLOP/s and jumps between the two when only the heap is shifted, e.g.
``198 199 200 154 151 152 ...`` (torch stays at 155-170); two of eight fresh processes started slow.
res4a_branch1 (mb8ic512ih28oc1024oh14kh1sh2): 171 then 146 after a shift (torch 189 -> 172), another
process 147 throughout; bf16 NHWC res2_branch2b stayed at 412-420 (torch 455-462) in two processes.
Page faults per call are 0 in both states and huge pages (numpy's MADV_HUGEPAGE on >= 4 MiB arrays)
made no difference with the input and output in fixed mmap'd buffers; moving the GEMM driver's
per-thread packing buffer (``x.buf`` in gemm_f32.c) by multiples of 256 bytes modulo 4 KiB against a
fixed input and output switched between the two rates. So the full bench's late-layer slowdown is an
address-placement (aliasing / set-conflict) effect, not a growing scratch pool or the thread pool.
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("desc", nargs="?", default="mb8ic64ih56oc64oh56kh1")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()

    from onepath.bench.cli import steady_malloc
    steady_malloc()
    import onepath
    from onepath.bench import benchdnn
    from onepath.bench.conv_suite import conv_case
    from onepath.bench.core import SETTLE_S, BenchConfig
    onepath.set_num_threads(a.threads)
    case = conv_case(benchdnn.parse(a.desc), a.dtype, a.layout, BenchConfig(threads=a.threads), "probe",
                     np.random.default_rng(0))
    tfn = case.baselines.get("torch") if a.torch else None
    if tfn is not None:
        import torch
        torch.set_num_threads(a.threads)

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]

    def rate(fn, n=40):
        fn()
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n)
        return case.flops / best / 1e9

    held = []
    for k in range(a.rounds):
        line = f"round {k:2d}  onepath {rate(case.run):6.1f} GFLOP/s"
        if tfn is not None:
            time.sleep(SETTLE_S)
            line += f"  torch {rate(tfn):6.1f}"
        print(line, flush=True)
        held.append(libc.malloc(48 << 10 if k % 2 == 0 else 1000 + 320 * k))  # shift the heap


if __name__ == "__main__":
    main()
