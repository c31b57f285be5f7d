"""The registry: the single source of truth for (op, dtype, ISA level) -> kernel and its blocking.

Rows are ordered fastest first for each (op, dtype) and always end in ``generic``, as oneDNN orders
its implementation lists. ``select`` walks them and returns the first row whose level the caller may
run (host CPU and OS, lowered by the cap). Dispatch, ``python -m onepath info``, the bench and the
tests all read this table; nothing else names kernels.

Blocking (BLIS terms): MR x NR is fixed by the micro-kernel (a fact of the compiled code, checked by
the tests against what the module reports); MC, KC and NC come, strongest first, from the tuning file
``python -m onepath tune`` wrote for this host (``tuning.py``; ``ONEPATH_TUNING``), a shipped row of
``TUNING`` for the microarchitecture, or the cache model ``blocking_for``. ``Kernel.blocking_from``
says which. The tuning file's choices go beside them: the conv formulation limits
(``conv_as_nhwc_limits``, over ``CONV_NCHW_AS_NHWC``) and a lower level's kernel for an (op, dtype)
(``tuned_kernel``; ``Kernel.kernel_from``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from .levels import LEVELS, level_index


@dataclass(frozen=True)
class Kernel:
    """One registry row.

    Attributes:
        op: operation name ("matmul", ...).
        dtype: compute dtype name of the inputs ("float32", "bfloat16").
        level: ISA level whose build holds the kernel ("generic", "avx2", ...).
        symbol: C entry point in that level's module (e.g. ``op_gemm_f32``).
        name: micro-kernel name shown by verbose/info (e.g. ``gemm_f32_avx512_core_14x32``).
        mr, nr: register blocking of the micro-kernel (rows of A x columns of B).
        mc, kc, nc: cache blocking (0 in the table means "derive from the caches").
        uarch: microarchitecture a tuning row applies to, or None for every CPU.
        algorithm: how the op is computed ("gemm"; conv rows: "1x1_gemm", "implicit_gemm",
            "depthwise", ...), shown by verbose lines and info.
        elem_bytes: bytes per packed element (4: float32 panels, also bfloat16 widened while
            packing; 2: the native bfloat16 kernels' panels), for the cache model.
        k_align: packed depth granule (the native bfloat16 panels hold 32-deep blocks of K pairs).
        blocking_from: where MC/KC/NC came from: "tuning file", "shipped" (``TUNING``),
            "cache model", or "unused" (depthwise: a direct kernel); empty in the raw table.
        kernel_from: "tuning file" when a tuning file's ``kernel_level`` choice made dispatch run
            this (lower-level) row where it would have run a higher level's (``tuned_kernel``);
            empty otherwise.
    """
    op: str
    dtype: str
    level: str
    symbol: str
    name: str
    mr: int
    nr: int
    mc: int = 0
    kc: int = 0
    nc: int = 0
    uarch: str | None = None
    algorithm: str = "gemm"
    elem_bytes: int = 4
    k_align: int = 1
    blocking_from: str = ""
    kernel_from: str = ""

    @property
    def module(self) -> str:
        """The extension module of the level: ``onepath.kernels._op_<level>``."""
        return f"onepath.kernels._op_{self.level}"


# Fastest first per (op, dtype). MR/NR are those of the compiled micro-kernels. Each section is
# owned by the kernels it describes (kernels/gemm_f32.c, the bf16 pieces, the conv pieces).
_MATMUL_F32 = (
    Kernel("matmul", "float32", "avx512_core", "op_gemm_f32", "gemm_f32_avx512_core_14x32", 14, 32),
    Kernel("matmul", "float32", "avx2", "op_gemm_f32", "gemm_f32_avx2_6x16", 6, 16),
    Kernel("matmul", "float32", "generic", "op_gemm_f32", "gemm_f32_generic_4x8", 4, 8),
    # kernels/gemm_small.c: problems too small to pay for packing and threads, A and B read in
    # place on the calling thread (ops/_small.py picks it per call; select() names the GEMM rows)
    Kernel("matmul", "float32", "avx512_core", "op_gemm_f32_small", "gemm_f32_small_avx512_core_8x32",
           8, 32, algorithm="small"),
    Kernel("matmul", "float32", "avx2", "op_gemm_f32_small", "gemm_f32_small_avx2_6x16", 6, 16,
           algorithm="small"),
    Kernel("matmul", "float32", "generic", "op_gemm_f32_small", "gemm_f32_small_generic_1x1", 1, 1,
           algorithm="small"),
)

_MATMUL_BF16: tuple[Kernel, ...] = (  # kernels/gemm_bf16.c, gemm_bf16_amx.c
    Kernel("matmul", "bfloat16", "avx512_core_amx", "op_gemm_bf16", "gemm_bf16_amx_32x32", 32, 32,
           elem_bytes=2, k_align=32),
    Kernel("matmul", "bfloat16", "avx512_core_bf16", "op_gemm_bf16", "gemm_bf16_avx512_bf16_14x32",
           14, 32, elem_bytes=2, k_align=32),
    Kernel("matmul", "bfloat16", "avx512_core", "op_gemm_bf16", "gemm_bf16_widen_avx512_core_14x32", 14, 32),
    Kernel("matmul", "bfloat16", "avx2", "op_gemm_bf16", "gemm_bf16_widen_avx2_6x16", 6, 16),
    Kernel("matmul", "bfloat16", "generic", "op_gemm_bf16", "gemm_bf16_widen_generic_4x8", 4, 8),
    # kernels/gemm_small.c: small C-contiguous bfloat16 products, widened while loading, in place
    Kernel("matmul", "bfloat16", "avx512_core", "op_gemm_bf16_small_cc", "gemm_bf16_small_avx512_core_8x32",
           8, 32, algorithm="small"),
    Kernel("matmul", "bfloat16", "avx2", "op_gemm_bf16_small_cc", "gemm_bf16_small_avx2_1x64", 1, 64,
           algorithm="small"),
    Kernel("matmul", "bfloat16", "generic", "op_gemm_bf16_small_cc", "gemm_bf16_small_generic_1x64", 1, 64,
           algorithm="small"),
)
# onepath.linear runs the matmul kernels (B = weight^T, or a prepacked weight): same rows, op "linear"
# (but the bfloat16 small kernel, which reads B row-major only: linear's W^T is not)
_LINEAR: tuple[Kernel, ...] = tuple(replace(r, op="linear") for r in _MATMUL_F32 + _MATMUL_BF16
                                    if not (r.dtype == "bfloat16" and r.algorithm == "small"))

# Convolution (kernels/conv_*.c): per algorithm, fastest level first; implicit_gemm leads so that
# select("conv2d", dtype) names the general algorithm; select("conv2d", dtype, problem=...) the one a
# problem runs (onepath.ops.conv picks it per call).
# float32 runs the float32 micro-kernels. bfloat16 (input and weight bfloat16) runs the BF16 GEMM
# kernels where the level has them (conv_bf16.c: AMX tiles, VDPBF16PS; symbol op_conv2d_bf16) and
# is widened to float32 below (a float32 weight with bfloat16 input also takes the widening rows).
# Depthwise is a direct float32-FMA kernel at every level (bfloat16 widened while loading).
_CONV_LEVELS = (("avx512_core", 14, 32, 16), ("avx2", 6, 16, 8), ("generic", 4, 8, 4))
_CONV_GEMM_ALGOS = (("implicit_gemm", "op_conv2d_f32"), ("1x1_gemm", "op_conv2d_f32"),
                    ("grouped", "op_conv2d_f32"))
_CONV_BF16_NATIVE = (("avx512_core_amx", "amx", 32, 32), ("avx512_core_bf16", "avx512_bf16", 14, 32))


def _conv_rows(dt):
    out = []
    for algo, sym in _CONV_GEMM_ALGOS + (("depthwise", "op_conv2d_dw_f32"),):
        if dt == "bfloat16" and algo != "depthwise":
            for lv, tag, mr, nr in _CONV_BF16_NATIVE:
                out.append(Kernel("conv2d", dt, lv, "op_conv2d_bf16", f"conv_{algo}_bf16_{tag}_{mr}x{nr}",
                                  mr, nr, algorithm=algo, elem_bytes=2, k_align=32))
        for lv, mr, nr, vw in _CONV_LEVELS:
            dwk = algo == "depthwise"
            out.append(Kernel("conv2d", dt, lv, sym,
                              f"conv_{algo}_f32_{lv}_" + (f"v{vw}" if dwk else f"{mr}x{nr}"),
                              1 if dwk else mr, vw if dwk else nr, algorithm=algo))
    return tuple(out)


_CONV: tuple[Kernel, ...] = _conv_rows("float32") + _conv_rows("bfloat16")


def algorithm_for(c, oc, kh, kw, groups) -> str:
    """The conv2d algorithm (a conv row's ``algorithm``) that runs a problem of ``c`` input channels,
    ``oc`` output channels, a ``kh`` x ``kw`` kernel and ``groups`` groups: "depthwise" (one channel
    per group), "1x1_gemm", "grouped" or "implicit_gemm". Like oneDNN's implementation list, the choice
    lives beside the rows: onepath.ops.conv and ``select(problem=...)`` both ask here."""
    if groups > 1 and groups == c:
        return "depthwise"
    if kh == 1 and kw == 1:
        return "1x1_gemm"
    if groups > 1:
        return "grouped"
    return "implicit_gemm"

REGISTRY: tuple[Kernel, ...] = _MATMUL_F32 + _MATMUL_BF16 + _LINEAR + _CONV

# Shipped tuning rows: (uarch, level, op, dtype) -> (MC, KC, NC) measured on a host of that
# microarchitecture (the comment names the host, date and method). A "conv2d" row applies to the
# GEMM-based conv algorithms (depthwise has no cache blocking). A microarchitecture nobody measured
# has no row: the cache model covers it. Rows from a tuning file (`python -m onepath tune`) win.
TUNING: dict[tuple[str, str, str, str], tuple[int, int, int]] = {
    # AMD EPYC Zen 4 (family 25 model 17 stepping 1, L1d 32 KiB, L2 1 MiB, L3 32 MiB; KVM guest,
    # 2 cores), 2026-11-30, VM shared (load 5-10 on 2 cores), every pick checked by paired best-of
    # A/B runs at 1 thread.
    # GEMM (matmul, linear), against the cache model on 512-2048 squares: float32, the model's KC 160
    # (a B micro-panel in two thirds of L1d) re-reads and re-writes the C tile too often; a 512-deep
    # B micro-panel streamed from L2 runs 4-10% faster (BLIS's zen4 sgemm config uses KC 480 for the
    # same reason). bfloat16 (VDPBF16PS): KC 1024 halves the float partial-sum passes of KC 512
    # (+7% at 1024^3, equal at 512^3 and 2048^3); the model's KC 320 was slower still (86 vs 119
    # GFLOP/s at 1024^3). Then (2026-11-30, quiet VM, paired against torch 2.13 with A read in place,
    # BF16_VARIANTS): KC 2048 holds all of a 2048-deep K in one block (no float partial sums through
    # a 16 MiB scratch and a second pass): 2048^3 0.94 -> 1.03x torch at 2 threads, 1.015 -> 1.03x at
    # 1; its 128 KiB B micro-panel streams from L2 as the 64 KiB one did. MC 112 (A block 448 KiB
    # of the 1 MiB L2 beside that panel) against 168: +1..4% at 2 threads, equal at 1.
    # bfloat16 MC 112 -> 518 (2026-12-02, same VM, with the "next_panel_l2" variant, MC toggled in one
    # process paired with torch 2.13 at 1 thread, x torch at MC 112 -> 518): every row block passes
    # over the whole packed KC x NC block of B (8 MiB at KC 2048, NC 2048, more than this VM keeps of
    # its 32 MiB L3) or over a prepacked weight in memory, so fewer, larger row blocks (A block 2 MiB,
    # from L3) read B fewer times: 2048^3 1.05 -> 1.10, raw (out, in) weight 512 x 4096 x 4096 0.96 ->
    # 1.01, prepacked weight m = 256 / 512 / 1024 0.95 / 1.00 / 1.03 -> 1.01 / 1.03 / 1.07; 1024^3
    # (B block 2 MiB) 1.09 -> 1.06. At 2 threads the runs scattered more than the difference.
    **{("zen4", "avx512_core", op, "float32"): (126, 512, 3072) for op in ("matmul", "linear")},
    **{("zen4", "avx512_core_bf16", op, "bfloat16"): (518, 2048, 2048) for op in ("matmul", "linear")},
    # conv2d and the widened bfloat16 rows: `python -m onepath tune --threads 1 --level avx512_core
    # --level avx512_core_bf16` (full search), then A/B through conv2d on ResNet-50 3x3 and 1x1
    # layers: the bf16 3x3 conv's larger MC/KC held up (+1..5%); the other picks were within noise or
    # slower, so those rows pin the cache model's values, now measured.
    # float32 conv2d KC 160 -> 256 (2026-11-30, same VM, 2 threads, ResNet-50 batch 8 paired with
    # torch, after the in-place A kernels of conv_f32.c): a 1x1 layer's K of 256 in one block instead
    # of 160 + 96 (the C block and the input stream pass once), +5-20% on the 1x1 layers, 3x3 equal.
    ("zen4", "avx512_core", "conv2d", "float32"): (126, 256, 3072),
    ("zen4", "avx512_core", "matmul", "bfloat16"): (126, 160, 3072),   # widened to float32 panels
    ("zen4", "avx512_core", "linear", "bfloat16"): (126, 160, 3072),
    ("zen4", "avx512_core", "conv2d", "bfloat16"): (126, 160, 3072),
    # bfloat16 conv2d (VDPBF16PS) KC 480 -> 2048, MC 252 -> 112 (2026-11-30, same VM, 2 threads,
    # ResNet-50 batch 1 and 8 paired with torch 2.13): as for the bf16 GEMM, a depth of 512-2304 in
    # one KC block instead of 480 + a 32-544 remainder (no second pass through a float partial-sum
    # scratch allocated per call): the 1x1 layers with K 512-1024 at batch 8 +5..15% (res4a_branch1
    # NCHW 0.78 -> 0.90x torch, res5_branch2c 0.79 -> 0.91), the 3x3 layers +1..7%; MC 112 +0..2%.
    ("zen4", "avx512_core_bf16", "conv2d", "bfloat16"): (112, 2048, 3072),
    # Intel Xeon AMX VM, Sapphire Rapids class (it reports family 6 model 167 stepping 1, AMX, L1d
    # 48 KiB, L2 2 MiB; KVM guest, 2 cores), 2026-12-03: `python -m onepath tune --threads 2` (full
    # search, 624 s). It kept the cache model's blocking for every float32 row and the bfloat16 AMX
    # matmul and conv2d (the other candidates within +-2%; the float32 conv2d row pinned here as
    # measured, the float32 matmul / linear and AMX matmul / conv2d rows since measured otherwise,
    # below), and chose for the bfloat16 AMX linear MC 96, KC 1024, NC 384 (1205 -> 1483 GFLOP/s on
    # 128x3072x768 and 512x4096x1024: a 768 KiB KC x NC block of the weight packed per call stays
    # in the 2 MiB L2, the model's 3 MiB one does not). Checked in one process against torch 2.13's
    # F.linear (2 threads, median of 7, x torch cache model -> row): 128x3072x768 0.64 -> 1.01,
    # 512x4096x1024 0.58 -> 0.77, 256x4096x4096 0.71 -> 0.85, 64x4096x4096 0.63 -> 0.89,
    # 16x4096x4096 0.46 -> 0.69, 2048x4096x4096 0.58 -> 0.59. Keyed to the one AMX
    # microarchitecture measured; Emerald / Granite Rapids keep the cache model.
    # float32 matmul and linear MC 168 -> 112, KC 256 -> 512 (2026-12-04, same VM, the two rows
    # alternated in one process with numpy's OpenBLAS, x numpy 168/256 -> 112/512, 2 threads):
    # 2048^3 0.97 -> 1.00 and 1.00 -> 1.03 (two runs), 1024^3 1.06 -> 1.07, 512x768x3072 1.03 ->
    # 1.11, 128x768x768 1.14 -> 1.19; 1 thread 2048^3 0.98 -> 0.99 and 1.05 -> 1.04, 512x3072x768
    # 1.03 -> 1.06, 128x768x768 1.16 -> 1.09 (K 768 in two KC blocks either way). Half as many KC
    # blocks: the float C tile read and written half as often, and a BERT / MiniLM depth of 384-512
    # in one block (MiniLM's 1344 x 384 x N linears +2..6% against torch's F.linear). The
    # micro-kernel reads B panels of 64 KiB from L2 at this depth as fast as the 32 KiB ones (KC 384
    # measured between the two).
    # conv2d keeps KC 256 (ResNet-50 NHWC batch 8 with KC 384 / 512: -1..3%, its 1x1 layers' K of
    # 256 already one block).
    **{("sapphirerapids", "avx512_core", op, "float32"): (112, 512, 3072)
       for op in ("matmul", "linear")},
    ("sapphirerapids", "avx512_core", "conv2d", "float32"): (168, 256, 3072),
    # bfloat16 AMX matmul KC 512 -> 2048, MC 160 -> 256 (2026-12-03, same VM, after tune: the rows
    # in alternation in one process, GFLOP/s at 1 / 2 threads): 512^3 1218 / 2260 -> 1240 / 2168,
    # 1024^3 985 / 1776 -> 1069 / 1910, 2048^3 995 / 1925 -> 1131 / 2187. A depth of up to 2048 in
    # one KC block: no float partial-sum C (16 MiB at 2048^2, from memory) reloaded into the tiles
    # per block, and a bfloat16 C written from the tile buffer (BF16_VARIANTS); MC 256: each B
    # micro-panel, read from L3, serves 8 tile rows. tune's (160, 512) was chosen on other shapes.
    ("sapphirerapids", "avx512_core_amx", "matmul", "bfloat16"): (256, 2048, 3072),
    # bfloat16 AMX linear KC 1024 -> 2048 (2026-12-05, same VM, the two rows alternated in one
    # process beside torch 2.13's F.linear, x torch median of 5, 1 / 2 threads): 2048^3 0.82 / 0.85
    # -> 0.94 / 0.95, MiniLM's 1344x1536x384 0.90 / 0.93 -> 0.96 / 1.01, the other shapes alike.
    # A depth up to 2048 in one KC block is what lets the depth chunks (BF16_VARIANTS) run. The
    # loss: 128x3072x768 at 2 threads 0.97 -> 0.89 in blocks of 2048 + 1024, 0.93 since the driver
    # cuts such a K into equal blocks (op_gemm_drive; K 4096 shapes above within +-3%). The KC x NC
    # block of the weight packed per call is now 1.5 MiB, still inside the 2 MiB L2.
    ("sapphirerapids", "avx512_core_amx", "linear", "bfloat16"): (96, 2048, 384),
    # bfloat16 AMX conv2d KC 512 -> 2048 (2026-12-03, same VM, 2 threads, ResNet-50's 23 layers NHWC
    # paired with torch 2.13 per row, x torch geomean): batch 1 1.41 -> 1.45, batch 8 0.87 -> 0.93
    # (res4/res5 +5..30%: a depth of 576-4608 in one to three KC blocks, fewer float partial sums).
    ("sapphirerapids", "avx512_core_amx", "conv2d", "bfloat16"): (160, 2048, 3072),
}

# NC of a linear whose weight is prepacked (onepath.prepack), per (uarch, level, dtype), where the
# row's blocking is shipped (a tuning file's row is kept as measured). A raw weight's KC x NC block
# is packed per call and NC keeps it in L2 (the AMX linear row's 384 above); a prepacked weight is
# read in place, and a wider NC packs each MC x KC block of A once per NC columns, not per 384.
# sapphirerapids (the Intel AMX VM, 2026-12-04, 2 threads, the two rows alternated in one process
# with torch 2.13's F.linear, MiniLM's prepacked 1344 x K x N linears, x torch NC 384 -> 3072):
# 384 x 1152 0.87 -> 0.94, 384 x 384 0.81 -> 0.83, 384 x 1536 with GELU 0.97 -> 1.00, 1536 x 384
# 0.94 -> 0.94 (geomean 0.89 -> 0.93).
PREPACKED_NC: dict[tuple[str, str, str], int] = {
    ("sapphirerapids", "avx512_core_amx", "bfloat16"): 3072,
}


def prepacked_row(row: Kernel) -> Kernel:
    """``row`` (a "linear" row from ``select``) as a prepacked weight runs it: NC from
    ``PREPACKED_NC`` when the row's blocking is shipped and the table has one for the row's uarch,
    level and dtype; ``row`` itself otherwise."""
    shipped = row.blocking_from == "shipped"
    nc = PREPACKED_NC.get((row.uarch, row.level, row.dtype)) if shipped else None
    return row if nc is None else replace(row, nc=nc)


# Conv algorithm choice per microarchitecture: which NCHW convolutions run in the NHWC formulation
# (C[pixel][oc]; kernels/conv_f32.c, op_conv_desc.nhwc = 2: the input and output transposed around
# it, without groups one GEMM over the pixels of all images, and a strided unpadded 1x1 kernel
# reading only its sampled pixels). Keyed by (uarch, level of the conv row), per kind of problem
# the largest output plane (OH*OW pixels per image) that takes it:
#   "kxk"         kernels larger than 1x1 (implicit_gemm), any batch;
#   "kxk_stride1" the same with stride 1 (the larger of the two limits applies);
#   "1x1_batch"   1x1 kernels, stride 1, batch of 2 or more;
#   "1x1_stride"  1x1 kernels with a stride > 1, any batch;
#   "1x1_single"  1x1 kernels, stride 1, batch 1;
#   "kxk_batch"   kernels larger than 1x1 at a batch of 2 or more (the largest of the k x k limits
#                 applies; no `tune` choice: shipped rows only, kept beside a tuning file's classes).
# At small planes the NCHW GEMM's N = OH*OW leaves a ragged last micro-panel (196 pixels fill 6.1
# panels of 32, 49 fill 1.5) and a batch repacks the weight per image; the NHWC GEMM is full and
# packs the weight once.
# zen4: measured 2026-11-30 on an AMD EPYC Zen 4 VM (2 cores), ResNet-50 layers paired in one
# process at 1 thread (CPU time): 3x3 with 14x14 and 7x7 outputs gain 1.05-1.11x (float32) and
# 1.20-1.33x (bfloat16, VDPBF16PS) at batch 1, more at batch 8; 28x28 and larger and the 7x7/s2
# stem lose; stride-1 1x1 loses at batch 1 and at 14x14, gains 1.1-1.3x at 7x7 with batch 8; the
# strided 1x1 (downsample) layers gain 1.07-1.19x (float32) and 1.06-1.17x (bfloat16; 28x28: 1.0).
# zen4 float32 "kxk_stride1" 784, 2026-11-30 (same VM, 2 threads, paired with torch): with the NHWC
# k x k kernel that reads its input in place (conv_f32.c, op_conv2d_nhwc_brg_f32), ResNet-50
# res3_branch2b (28x28, stride 1) gains 0.86 -> 0.93x torch at batch 1 and 0.76 -> 0.88x at batch 8;
# the strided res3a_branch2b (56x56 input) loses (0.80 -> 0.48x: the transposes of its 4x larger
# input), hence stride 1 only. zen4 bfloat16 "kxk_stride1" 784, same day: `tune` chose it at 1 and
# 2 threads (res3_branch2b NCHW 0.63 -> 0.88x torch at 2 threads, 0.84 -> 0.92 at 1 thread).
# zen4 bfloat16 "kxk" 784 (was 196), same VM, 2 threads, paired with torch 2.13 (median of 5-7): the
# strided res3a_branch2b (56x56 input, 28x28 output) through the NHWC batch-reduce kernel instead of
# the NCHW GEMM over the phase-split input: batch 1 200 -> 289 GFLOP/s (0.94 -> 1.36x torch), batch 8
# 348 -> 387 (0.82 -> 0.92x); res2_branch2b (56x56, stride 1, 3136 pixels) measured slower that way
# (batch 1 0.89 -> 0.86x, batch 8 0.83 -> 0.77x): it stays NCHW.
# zen4 float32 (avx512_core) "kxk" 784 and "kxk_stride1" 3136, 2026-11-30 (same VM, paired with torch,
# onepath GFLOP/s before -> after): res2_branch2b (56x56) batch 8 171 -> 182 at 2 threads, batch 1
# 179 -> 186 at 2 threads and 98 -> 106 at 1; the strided res3a_branch2b (28x28 output) batch 8
# 147 -> 169, batch 1 145 -> 179 at 2 threads and 89 -> 96 at 1 (the transposes around the NHWC
# batch-reduce kernel cost less than the NCHW GEMM's 64- and 128-row M edges and per-image weight packs).
# zen4 float32 (avx512_core) "1x1_single" 49, 2026-11-30 (same VM, 2 threads, median of 5, paired
# with torch 2.13, NCHW GEMM -> NHWC formulation, GFLOP/s): batch 1 res5_branch2a (C 2048 -> 512,
# 7x7) 130 -> 155 (0.85 -> 1.01x torch), res5_branch2c (512 -> 2048) 143 -> 173 (0.86 -> 1.04x): the
# NCHW GEMM's N = 49 pixels fill 32 + 17 columns of two 32-wide panels, the NHWC one's M = 49 rows
# 14 + 14 + 14 + 7 (a 7-row tile costs half a 14-row one on Zen 4's one 512-bit FMA per cycle).
# zen4 bfloat16 "kxk_stride1" stays 784, 2026-12-01, same VM: res2_branch2b (56x56, stride 1) NCHW
# through the NHWC batch-reduce kernel measured 397 vs 377 GFLOP/s (0.95 vs 0.90x torch, batch 8, 2
# threads) in a fresh process, but in 8 rounds under a shifted heap (torch 2.13 alternated) it ran
# 400-408 in most rounds and 303 in others (0.73x), while the NCHW GEMM held 377-389 in every one
# (0.90-0.93x); the full bench measured 0.74 against 0.84 and 0.90 for the GEMM. The transposes around
# the kernel are the sensitive part (NHWC is steady); the slow rounds follow the shared L3's state, not
# the heap (scripts/place_sweep.py).
# zen4 bfloat16 "kxk_batch" 3136, 2026-12-01, same VM, 2 threads, paired with torch 2.13 in one process:
# with CONV_BF16_OPTIONS "as_nhwc_image" (each thread transposes, convolves and transposes back whole
# images in its own L2) res2_branch2b (56x56, stride 1) at batch 8 runs that route instead of the NCHW
# GEMM, 0.87-0.90 -> 0.97-0.99x torch (numbers at CONV_BF16_OPTIONS; not the same bits: the NHWC depth
# order). At batch 1 it stays on the NCHW GEMM ("kxk_stride1" 784, above). With more threads than
# images the whole-batch route runs instead (unmeasured at 56x56: the plan does not depend on threads).
# So on zen4 an image's bfloat16 bits alone and in a batch can differ (README, documented
# differences); onepath.dask's blocks choose with the whole batch (ops.conv.route_batch).
# Hosts without a row keep the NCHW formulation (the Intel AMX class at avx512_core_bf16: `tune`
# found no class worth it there; its AMX level: the row below, since "amx_s1"). float32 1x1
# problems at batch >= 2 that CONV_F32_OPTIONS's "nchw1x1_joint" takes (zen4, sapphirerapids) run that
# instead.
CONV_NCHW_AS_NHWC: dict[tuple[str, str], dict[str, int]] = {
    # zen3 float32 (avx2, with CONV_F32_OPTIONS "nhwc_direct8": the NHWC k x k kernel reading its
    # input in place), AMD EPYC Zen 3 VM, 2026-12-06, ResNet-50's 3x3 layers in NCHW, NCHW GEMM ->
    # NHWC formulation alternated in one process with torch 2.13, 1 thread, x torch: batch 8
    # res5_branch2b 0.73 -> 1.00, res5a_branch2b 0.78 -> 1.16, res4_branch2b 0.91 -> 1.02,
    # res4a_branch2b 0.91 -> 1.07, res3_branch2b 1.04 -> 1.08, res3a_branch2b (784 pixels,
    # strided) 0.96 -> 1.04, res2_branch2b 0.85 -> 0.86; batch 1 res5a_branch2b 1.02 -> 1.36,
    # res5_branch2b 1.05 -> 1.20, res4a_branch2b 0.92 -> 1.01, res2_branch2b 0.87 -> 0.93, but
    # res3a_branch2b 0.92 -> 0.90 (1.24 -> 1.10 at 2 threads): strided planes over 196 pixels
    # stayed NCHW at batch 1, and the 1x1 layers lost through NHWC (res2a_branch2a 1.11 -> 0.48).
    # Those ran the float32 transposes element by element; with them in AVX2 register blocks
    # (conv_f32.c, op_conv_tr_task; 2026-12-07, same VM, 2 threads) `python -m onepath tune --op
    # conv2d` chose "kxk" 784 (strided 3x3 with 784-pixel outputs, NCHW time / NHWC time 1.02-1.03;
    # res3a_branch2b batch 1 paired with torch in three alternated runs: 133-144 -> 147-152
    # GFLOP/s). The row is one limit, 3136, for every k x k problem at any batch: with "kxk_batch"
    # (3136) beside a smaller "kxk", a strided plane between the two ran NCHW alone and NHWC in a
    # batch, and the two formulations' sums differ, so an image's bits depended on its batch (and on
    # onepath.dask's chunks; found by review). No 1x1 class, for the same reason: tune chose
    # "1x1_single" 49 (res5_branch2a 1.23, res5_branch2c 1.05 at batch 1) and "1x1_stride" 49
    # (res5a_branch1 1.22), but from batch 2 those problems run the joint GEMM (CONV_F32_OPTIONS),
    # which keeps the NCHW GEMM's bits, and "1x1_batch" measured 0.55-1.00.
    ("zen3", "avx2"): {"kxk": 3136},
    ("zen4", "avx512_core"): {"kxk": 784, "kxk_stride1": 3136, "1x1_batch": 49, "1x1_stride": 784,
                              "1x1_single": 49},
    # sapphirerapids float32: zen4's limits with zen4's float32 options (CONV_F32_OPTIONS, below),
    # measured together on the Intel AMX VM (2026-12-03, see there); `tune`'s own pick without those
    # options (every class 49) measured slower (ResNet-50 geomean 1.04 -> 1.01x torch).
    ("sapphirerapids", "avx512_core"): {"kxk": 784, "kxk_stride1": 3136, "1x1_batch": 49,
                                        "1x1_stride": 784, "1x1_single": 49},
    ("zen4", "avx512_core_bf16"): {"kxk": 784, "kxk_stride1": 784, "1x1_batch": 49, "1x1_stride": 784,
                                   "kxk_batch": 3136},
    # sapphirerapids bfloat16 at its AMX level (the Intel AMX VM, 2 cores, 2026-12-04, 2 threads,
    # ResNet-50 NCHW layers paired in one process with torch 2.13, median of 5, x torch NCHW GEMM ->
    # NHWC formulation): since CONV_BF16_OPTIONS "amx_s1" (the NHWC stride-1 k x k convolution on
    # AMX tiles reading its rows in place) the 3x3 layers run faster through the transposes and that
    # kernel. Stride 1: batch 8 res2_branch2b (56x56) 1.32 -> 1.52, res3_branch2b (28x28) 0.95 ->
    # 1.27, res4_branch2b (14x14) 0.75 -> 1.37, res5_branch2b (7x7) 0.78 -> 1.50; batch 1
    # res3_branch2b 1.16 -> 1.45, res4_branch2b 1.02 -> 1.54, res5_branch2b 1.40 -> 1.75,
    # res2_branch2b 1.63 -> 1.54 (taken for batch 8's gain). Strided: batch 8 res4a_branch2b 0.82 ->
    # 1.11, res5a_branch2b 1.08 -> 1.66; batch 1 1.00 -> 1.41, 1.63 -> 1.89; res3a_branch2b (784
    # output pixels, 56x56 input) lost that way on the GEMM route (batch 8 1.35 -> 1.09) and gains
    # since CONV_BF16_OPTIONS "amx_s2" (NHWC formulation with "kxk" 196 -> 784, same day: batch 8
    # 1.14 -> 1.37x, batch 1 1.48 -> 1.76x). The 1x1 layers lose or tie through NHWC (1x1 keys
    # measured: batch 8 res3_branch2c 4.95 -> 2.44): absent. "min_pixels" 16: an output plane of
    # fewer pixels stays NCHW, so that an image gives the same bits alone as in a batch (the NHWC
    # formulation's GEMM takes the AMX tiles from 16 rows of all images' pixels together,
    # OP_BF16_AMX_MIN_M: 9 pixels alone and 36 in a batch of 4 ran different kernels).
    ("sapphirerapids", "avx512_core_amx"): {"kxk": 784, "kxk_stride1": 3136, "min_pixels": 16},
}

# Variants of the bfloat16 kernels per (uarch, level) (kernels/gemm_bf16.c, op_gemm_bf16_set_variants;
# a host without a row runs neither):
#   "decode_vdpbf16ps"  small-M products (decode: m <= 4 rows, a raw (N, K) or prepacked weight)
#                       multiply with VDPBF16PS, one instruction per 32 products of a row, instead of
#                       widening the weight to float32 in register for two FMAs; 5 to 48 rows run
#                       the same loops in passes of 4 rows over an L2-resident part of the weight
#                       (kernels/gemm_bf16.c, OP_SM_NKDP_MAX_M and OP_SM_PKDP_MAX_M). Sapphire Rapids
#                       issues a 512-bit VDPBF16PS once per 2 cycles (the widening loops were measured
#                       faster there); Zen 4 issues one per cycle. Prepacked m = 1 keeps the
#                       widening loop, its far prefetch into L2 moved from 6 to 32 KiB ahead.
#   "a_in_place"        the VDPBF16PS GEMM (14 x 32) reads a row-major A in place instead of packing
#                       it: every thread packed the whole of A (its C block spans all rows when the
#                       threads split N), a cost that grows with the threads.
#   "c_bf16_in_register" the VDPBF16PS GEMM writes a bfloat16 C from its registers (epilogue, then
#                       VCVTNE2PS2BF16 after one VFPCLASSPS check per vector for NaN / subnormal
#                       lanes) when one KC block holds all of K, instead of storing a float tile
#                       that the driver reloads and rounds. Zen 4, paired A/B in one process, bit-
#                       identical C: 512^3 and 1024^3 +3% at 1 thread, +2.5-3% at 2. At the AMX
#                       level: the tiles' float scratch (in L1) rounded into C in one pass with the
#                       epilogue (op_ukr16_amx) where the driver made two over its tile buffer.
#   "widen_f32"         a bfloat16 GEMM of at least 49 rows (OP_DP_WIDEN_MIN_M) at a VDPBF16PS
#                       level runs avx512_core's float32 kernels on widened operands (row-major B:
#                       widened while packing; a raw W^T and a prepacked weight: k32 panels widened
#                       in register) with avx512_core's blocking, so avx512_core's bits: where
#                       VDPBF16PS issues at half the FMA rate (Sapphire Rapids) that is faster.
#   "thin_nc"           the VDPBF16PS GEMM of at most 256 rows sweeps B in blocks of at most 256
#                       columns (the row's NC otherwise, 2048 on zen4): the block every row block of
#                       A passes over is read from cache after its first pass, and a raw (out, in)
#                       weight packed per call is read back from cache. Same sums. A prepacked
#                       weight whose rows fit one row block keeps the row's NC (on zen4, since MC
#                       518, every prepacked weight of at most 256 rows: the prepacked figures
#                       below were taken at MC 112). Zen 4, K = N = 4096,
#                       2026-12-02, off / on alternated in one process with torch 2.13: raw weight
#                       m = 49 / 64 / 128 / 256, 1 thread 0.77 / 0.82 / 0.74 / 0.82 -> 0.95 / 0.93 /
#                       0.87 / 0.90x torch, 2 threads 0.79 / 0.82 / 0.81 / 0.89 -> 0.94 / 0.93 /
#                       0.95 / 1.11x; prepacked m = 128 / 256 at 1 thread 0.92 / 0.90 -> 0.96 / 0.94x.
#   "next_panel_l2"     the VDPBF16PS GEMM's driver fetches the next B micro-panel into L2, a slice
#                       per micro-kernel call over the current one: the first call on each panel in
#                       a row block otherwise reads it from L3 or, prepacked, from memory. Same sums.
#                       Zen 4, 2026-12-02, old / new build in alternate processes, paired with torch
#                       2.13 at 1 thread: 2048^3 1.02 -> 1.04x torch, prepacked 512 x 4096 x 4096
#                       0.92-0.96 -> 0.98-1.0x (with MC 112; the shipped MC 518 row adds to it).
#   "depth_chunks"      the AMX GEMM passes each B micro-panel in depth chunks of 256, every row
#                       panel of the row block per chunk, the float partial sums stored between
#                       chunks and reloaded into the tiles (kernels/gemm_bf16_amx.c, OP_AMX_KCHUNK):
#                       the chunk of B stays in L1 across the row panels, where a 2048-deep panel
#                       was read from L2 by each. Same sums. Only where one KC block holds all of K.
#                       A bfloat16 C is then written as "c_bf16_in_register" writes it at this level
#                       (op_dp_tile16_out: epilogue, then rounded once; the same bits), with or
#                       without that variant.
# zen4: measured 2026-11-30 on an AMD EPYC Zen 4 VM (2 cores), paired against torch 2.13 in one
# process: decode K = N = 4096 at 1 thread, raw weight m = 1 / 4 from 26 / 67 to 45 / 100 GFLOP/s,
# prepacked m = 1 / 4 from 36 / 97 to 43-50 / 165-185 (m = 1: the prefetch distance); A in place
# (no copy of A, whose rows every thread packed whole when the threads split N): 512^3 +0.5%
# at 1 thread, +2% at 2.
# sapphirerapids (the Intel AMX VM, 2026-12-03, 1 and 2 threads, off / on alternated in one process,
# bit-identical C): "c_bf16_in_register" at the AMX level (the tiles' float scratch rounded into
# the bfloat16 C in one pass with the epilogue, op_ukr16_amx): linear with bias, prepacked, M 1344,
# K 384, N 384 / 1152 / 1536 (MiniLM's) +13 / +12 / +16% at 2 threads, with GELU +23%; matmul
# 512^3-2048^3 +0..3%. "depth_chunks" (2026-12-05, GFLOP/s off -> on, median of 7 alternations,
# torch 2.13 beside them): 1 thread 512^3 814 -> 847, 1024^3 878 -> 950 (940 -> 1034 in another
# run), 2048^3 890 -> 884 (1092 -> 1097); 2 threads 1424 -> 1427, 1613 -> 1753, 1822 -> 1878;
# MiniLM's linears (1344 rows, 2 threads, raw / prepacked weight) 384 x 1152 1596 -> 1691 /
# 1752 -> 1797, 384 x 384 1442 -> 1508 / 1565 -> 1771, 384 x 1536 1630 -> 1707 / 1753 -> 1675,
# 1536 x 384 1707 -> 1747 / 1768 -> 1794.
# "next_panel_l2" there: 1024^3 and 2048^3 -8..10% (not shipped). At the
# avx512_core_bf16 cap, "widen_f32": bfloat16 squares 512 / 1024 / 2048 against torch 2.13 capped
# alike (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16), 1 thread 0.98 / 0.98 / 0.99 -> 1.58 / 1.58 / 1.46x,
# 2 threads 0.98 / 0.98 / 1.00 -> 1.49 / 1.56 / 1.53x; linear, raw and prepacked weights, see
# OP_DP_WIDEN_MIN_M (kernels/gemm_bf16.c).
BF16_VARIANTS: dict[tuple[str, str], frozenset[str]] = {
    ("zen4", "avx512_core_bf16"): frozenset({"decode_vdpbf16ps", "a_in_place", "c_bf16_in_register",
                                             "thin_nc", "next_panel_l2"}),
    ("sapphirerapids", "avx512_core_amx"): frozenset({"c_bf16_in_register", "depth_chunks"}),
    ("sapphirerapids", "avx512_core_bf16"): frozenset({"widen_f32"}),
}


# the bits of op_gemm_bf16_set_variants
BF16_VARIANT_FLAGS = {"decode_vdpbf16ps": 1, "a_in_place": 2, "c_bf16_in_register": 4, "thin_nc": 8,
                      "next_panel_l2": 16, "widen_f32": 32, "depth_chunks": 64}


def bf16_variants(level: str, uarch: str | None = None) -> frozenset[str]:
    """The bfloat16 kernel variants ``level`` runs on ``uarch`` (default: this host's), per
    ``BF16_VARIANTS``."""
    if uarch is None:
        uarch = _probe().uarch
    return BF16_VARIANTS.get((uarch, level), frozenset())


def bf16_variant_flags(level: str, uarch: str | None = None) -> int:
    """``bf16_variants`` as the flags of ``op_gemm_bf16_set_variants`` (what the kernel loader sets
    when it loads ``level``'s module, so every caller, ``tune`` included, runs them)."""
    return sum(BF16_VARIANT_FLAGS[v] for v in bf16_variants(level, uarch))


def conv_as_nhwc_limits(level: str, dtype: str, uarch: str | None = None) -> tuple[dict, str]:
    """The NCHW-as-NHWC limits ({class: pixels}, see ``CONV_NCHW_AS_NHWC``) of the conv rows of
    ``level`` and ``dtype`` on ``uarch``, and where they came from: "tuning file" (this host's
    ``conv_as_nhwc`` choice, only when ``uarch`` is None: the live host; it replaces the classes it
    names), "shipped" or "none" (no rule: the NCHW formulation)."""
    live = uarch is None
    if live:
        uarch = _probe().uarch
    lim = CONV_NCHW_AS_NHWC.get((uarch, level))
    src = "none" if lim is None else "shipped"
    lim = dict(lim or {})
    if live:
        from . import tuning
        tuned = tuning.choices().get((level, "conv2d", dtype), {}).get("conv_as_nhwc")
        if tuned:
            lim.update(tuned)
            src = "tuning file"
    return lim, src


def conv_nchw_as_nhwc(row: Kernel, n: int, pixels: int, strided: bool = False,
                      uarch: str | None = None) -> bool:
    """Whether an NCHW convolution (batch ``n``, ``pixels`` output pixels OH*OW per image, a
    stride > 1 when ``strided``) on conv ``row`` runs in the NHWC formulation on ``uarch`` (default:
    this host's, where a tuning file's ``conv_as_nhwc`` choice wins), per ``CONV_NCHW_AS_NHWC``.
    ``n`` is the batch whose route is chosen: for a block of onepath.dask's, the whole array's
    (ops.conv.route_batch), so that the block gives the whole call's bits."""
    if row.algorithm not in ("implicit_gemm", "1x1_gemm"):
        return False
    lim, _ = conv_as_nhwc_limits(row.level, row.dtype, uarch)
    if not lim or pixels < lim.get("min_pixels", 0):   # ("min_pixels": smaller planes stay NCHW)
        return False
    if row.algorithm == "implicit_gemm":
        return (pixels <= lim.get("kxk", 0) or (not strided and pixels <= lim.get("kxk_stride1", 0))
                or (n > 1 and pixels <= lim.get("kxk_batch", 0)))
    if strided:
        return pixels <= lim.get("1x1_stride", 0)
    return pixels <= lim.get("1x1_batch" if n > 1 else "1x1_single", 0)


# Options of the float32 thin-product paths (kernels/gemv_f32.c, op_gemv_f32_options), per
# (uarch, level of the module): "prefetch_next" prefetches the next block of streamed weight rows
# into L2 while the current block is in use (x @ W row stream with M <= 8, and x @ W.T dot path);
# "ksplit" gives each thread of the x @ W row stream a contiguous range of whole W rows (K), the
# partial sums added at the end, instead of a column range (N); the K parts are the problem's (two),
# at one thread too, so the bits do not depend on the thread count (gemv_f32.c,
# OP_KN_KSPLIT_PARTS; a split by the thread count once made them). A host without a row runs
# neither.
# zen4: measured 2026-11-30 on an AMD EPYC Zen 4 VM (2 cores), K = N = 4096, paired in one process
# against numpy (OpenBLAS 0.3.31), x numpy before -> after: 1 thread, prefetch_next: M = 1 x @ W
# 0.99 -> 1.14-1.17, x @ W.T 1.11 -> 1.38-1.42, M = 4 x @ W 3.2 -> 4.3, x @ W.T 3.9 -> 4.8; 2 threads,
# both: M = 1 x @ W 0.98 -> 1.19-1.28 (ksplit: each thread one sequential 32 MiB stream instead of
# 8 KiB row segments; 63 -> 80 GB/s in a C loop), x @ W.T 0.98 -> 1.20 (when the VM's memory
# bandwidth is contended both sides meet at the same limit: 1.03-1.07). M = 9..16 x @ W computes
# enough per weight element that the prefetch only added L2 traffic: not used there (gemv_f32.c).
# sapphirerapids (the Intel AMX VM): at 2 threads (`tune --threads 2`, 2026-12-03) the four sets
# measured within 2% of each other (geomean of M = 1, 4, 16, both forms: none 43.7, prefetch_next
# 43.3, ksplit 44.2, both 43.2 GFLOP/s), but at 1 thread prefetch_next pays (2026-12-06, none /
# prefetch_next alternated in one process with numpy, K = N = 4096, GB/s of W): M = 1 x @ W 24.1
# -> 25.1, x @ W.T 23.2 -> 25.5 (numpy 23.4), M = 4 16.7 -> 23.2 and 16.8 -> 23.7; at 2 threads
# M = 1 x @ W.T 45.5 -> 48.0 (numpy 47.9), M = 4 43.3 -> 46.3 and 38.8 -> 45.2. ksplit: no gain.
# zen3 (AMD EPYC Zen 3 VM, avx2, 2026-12-07, K = N = 4096, off / ksplit alternated in one process
# with numpy, GB/s of W best / median): 2 threads M = 1 x @ W 18.5 / 11.8 -> 21.1 / 13.8 and, in
# two more runs, 22.8 / 17.2 -> 29.9 / 19.5 and 22.0 / 14.8 -> 25.3 / 17.3 (numpy 26-30 / 13-23),
# M = 4 13.7 / 9.5 -> 20.7 / 10.5; 1 thread within noise. The AVX2 build splits K only up to 4 rows
# (M = 16 lost: gemv_f32.c, OP_KN_KSPLIT_MAX_M). prefetch_next lost there (1 thread M = 1 x @ W
# 17.3 -> 11.4 GB/s).
GEMV_F32_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("zen3", "avx2"): ("ksplit",),
    ("zen4", "avx512_core"): ("prefetch_next", "ksplit"),
    ("sapphirerapids", "avx512_core"): ("prefetch_next",),
}
GEMV_F32_FLAGS = {"prefetch_next": 1, "ksplit": 2}  # the bits of op_gemv_f32_options


def gemv_f32_options(level: str, uarch: str | None = None) -> tuple[tuple[str, ...], str]:
    """The thin float32 product options (names of ``GEMV_F32_FLAGS``) of ``level``'s module on
    ``uarch``, and where they came from: "tuning file" (this host's ``thin_f32`` choice, only when
    ``uarch`` is None: the live host; it replaces the shipped row), "shipped" or "none"."""
    live = uarch is None
    if live:
        uarch = _probe().uarch
    opts = GEMV_F32_OPTIONS.get((uarch, level))
    src = "none" if opts is None else "shipped"
    if live:
        from . import tuning
        tuned = tuning.choices().get((level, "matmul", "float32"), {}).get("thin_f32")
        if tuned is not None:
            opts, src = tuned, "tuning file"
    return tuple(opts or ()), src


def gemv_f32_flags(level: str, uarch: str | None = None) -> int:
    """The ``op_gemv_f32_options`` bit set for the module of ``level`` on ``uarch`` (default: this
    host's, where a tuning file's ``thin_f32`` choice wins), per ``gemv_f32_options``."""
    return sum(GEMV_F32_FLAGS[o] for o in gemv_f32_options(level, uarch)[0])


# Options of the float32 convolutions (kernels/conv_f32.c, op_conv_f32_options), per (uarch, level of
# the module): "brg_full_k" runs the NHWC k x k batch-reduce kernel (op_conv2d_nhwc_brg_f32; also the
# NCHW convolutions computed in the NHWC formulation) over all of K in one block while K <= 4608
# (each C tile written once; the K x 32 weight panel, up to 576 KiB, read from L2), instead of KC
# blocks of the conv2d blocking; "brg_nsplit": when the weight is larger than the padded input, that
# kernel's threads split the output channels (each task one 32-column panel over all pixels: the
# weight read once) instead of the pixels (the weight read once per pixel block). A host without a
# row runs neither.
# zen4: measured 2026-11-30 on an AMD EPYC Zen 4 VM (2 cores), ResNet-50 3x3 layers, paired in one
# process with torch (2 threads, median of 5, the option off/on alternated): brg_full_k (K 576 to
# 2304 in one block instead of KC 256) at batch 8 NHWC res2_branch2b 199 -> 213 GFLOP/s,
# res3a_branch2b 189 -> 204, res4_branch2b 179 -> 196 (0.80 -> 0.87x torch); brg_nsplit (res4
# 3x3, 14x14: 2.25 MiB weight) res4_branch2b batch 8 214 -> 223 (NHWC), 210 -> 217 (NCHW), batch 1
# 198 -> 209 (NHWC), 190 -> 202 (NCHW); the 7x7 layers (res5) measured slower through this kernel
# (half-row panels), left to the packing path. Intel: the whole set, below.
# "brg_ow7": outputs whose rows are multiples of 7 pixels (the 7x7 planes of res5) also run that
# kernel, a micro-panel being two 7-pixel row pieces (a ragged last panel: one); "brg_nsplit_pack":
# in the output-channel split each task packs its own 32-column weight panel (K x 32 floats, in L2)
# right before using it, instead of one shared packed copy of the whole weight written first.
# zen4, 2026-11-30 (same VM, 2 threads, median of 5, paired with torch, GFLOP/s without -> with):
# brg_nsplit_pack res4_branch2b (14x14, 2.25 MiB weight) batch 1 NCHW 159 -> 199, NHWC 162 -> 202,
# res4a_branch2b (28 -> 14, stride 2) 127 -> 151 NCHW, 148 -> 179 NHWC; brg_ow7 (with the pack)
# res5_branch2b (7x7) batch 1 NCHW 150 -> 175, NHWC 175 -> 200; batch 8 NCHW 199 -> 241, NHWC
# 199 -> 235 (0.81 -> 0.97x and 0.86 -> 1.02x torch).
# "brg_wide_rows": pixels 4 KiB apart (sw*C a multiple of 1024 floats: res5a_branch2b, C 512 at stride
# 2), left to the packing path before (the 14 rows of a panel in one L1d set), run that kernel over a
# padded copy with C + 16 floats per pixel. zen4, same day and method: res5a_branch2b batch 8 NCHW
# 150 -> 178, NHWC 180 -> 210 GFLOP/s (0.74 -> 0.88x, 0.89 -> 1.04x torch); batch 1 unchanged.
# "brg_skip_pad": that kernel skips the taps that read padding (the border pixels' FMAs left out, the
# input read in place without a padded copy where every padding tap is skipped), in the 32-column
# weight panels whose weights are all finite (the pack checks them; a panel with an Inf or NaN runs
# without the skip over a padded copy: 0 * Inf = NaN at the borders, as at every level). zen4,
# 2026-11-30 (same VM, 2 threads, median of 7, paired with torch 2.13, GFLOP/s without -> with, x torch):
# batch 1 NCHW res3a_branch2b 144 -> 164 (0.89 -> 1.01x), res4a_branch2b 154 -> 178 (0.83 -> 0.96x),
# res5_branch2b 168 -> 195 (0.87 -> 1.02x); NHWC res2_branch2b 172 -> 196 (0.81 -> 0.92x),
# res4a_branch2b 173 -> 215 (0.85 -> 1.05x); batch 8 NCHW res3a_branch2b 189 -> 208 (0.90 -> 0.99x),
# res5_branch2b 215 -> 262 (0.85 -> 1.03x); every ResNet-50 3x3 layer +2% to +27%.
# "nchw1x1_direct_b": an NCHW 1x1 stride-1 unpadded convolution with OC/groups <= 64 and C/groups <= 256
# reads its input (the GEMM's B) in place in the micro-kernel instead of packing it (same sums).
# zen4, 2026-11-30 (same VM, 2 threads, median of 7, paired with torch 2.13 and the bit off/on,
# GFLOP/s off -> on, x torch): batch 8 res2a_branch2a (C 64 -> 64, 56x56) 168 -> 194 (1.05 -> 1.21x),
# res2_branch2a (C 256 -> 64) 157 -> 213 (1.17 -> 1.59x); batch 1 res2_branch2a 199 -> 217 (1.13 ->
# 1.23x). OC 128 / 256 measured 4-8% slower in place (left packed). Intel: the whole set, below.
# "nchw1x1_joint": an NCHW 1x1 convolution (groups 1, batch >= 2, unpadded, any stride whose samples
# lie in the input) with output planes of at most 3136 pixels (also, since 2026-12-01, the batch >= 2
# problems "nchw1x1_direct_b" would read in place: see op_conv_j1_fits) runs as one GEMM over the pixels of all images, out[oc][(n, pixel)] = W @ X
# (conv_f32.c, op_conv2d_nchw1x1_joint_f32; op_conv2d_f32_joint says whether a problem takes it):
# the B pack reads the (strided) pixels straight from the input, the weight is packed once per
# thread instead of once per image, B panels are full across images, C is written in NCHW in place.
# It replaces the per-image GEMM and, where CONV_NCHW_AS_NHWC routes
# these problems ("1x1_stride", "1x1_batch" at n >= 2), the NHWC formulation's subsample copy and
# transposes. Same sums (same kc), bit for bit. zen4, 2026-11-30 (same VM, 2 threads, paired with
# torch 2.13 and the bit off/on in one process, median of 7, GFLOP/s off -> on, x torch), batch 8:
# res3a_branch1 (stride 2, 28x28) 140 -> 196 (1.02 -> 1.43x), res4a_branch1 (stride 2, 14x14)
# 149 -> 187 (0.84 -> 1.05x), res5a_branch1 (stride 2, 7x7) 180 -> 192 (0.94 -> 1.00x),
# res4_branch2a 179 -> 204 (0.87 -> 0.99x), res5a_branch2a 191 -> 209 (0.88 -> 0.96x),
# res4_branch2c 191 -> 208 (0.97 -> 1.06x), res3_branch2a 171 -> 194 (0.96 -> 1.09x), res3a_branch2a
# 178 -> 189 (1.10 -> 1.17x), res5_branch2c 199 -> 206 (0.95 -> 0.98x), res5_branch2a 194 -> 194
# (0.93x both). Intel: the whole set, below.
# "nchw1x1_a_in_place": an NCHW 1x1 unpadded convolution (groups 1, OC > 64, not the joint GEMM: batch 1,
# or batch >= 2 with planes the joint GEMM does not take (measured at batch 1 only); strided: the
# sampled pixels copied first, then stride 1) runs as the per-image GEMM out = W @ X with the weight read in
# place by the micro-kernel (broadcasts from its rows) instead of packed per call, and replaces the NHWC
# formulation where CONV_NCHW_AS_NHWC routes such a problem ("1x1_single": the 7 x 7 planes): no input
# or output transpose and no weight pack, for a ragged pixel edge (49 = 32 + 17 columns). C a multiple
# of 1024 (weight rows 4 KiB apart: the 14 rows of a panel share one L1d set; in place res5_branch2a
# 143 -> 108 GFLOP/s) copies the weight rows per KC block instead (no transposes), read by the same
# micro-kernel. Same sums, bit for bit. zen4, 2026-12-01 (same VM, 2 threads, median of 5-11, paired with torch 2.13 and the bit
# off/on in one process, GFLOP/s off -> on, x torch), batch 1: res5_branch2c (C 512 -> 2048, 7x7)
# 116 -> 159 (0.79 -> 1.09x), 157 -> 166 and 159 -> 165 (0.92 -> 0.96x) in three runs, res5_branch2a
# (2048 -> 512, rows copied) 114 -> 140 (0.81 -> 1.00x), res4_branch2c (256 -> 1024, 14x14) 160 -> 181
# and 181 -> 201 (0.98 -> 1.09x), res4_branch2a (1024 -> 256, rows copied) 150 -> 162 (1.01 ->
# 1.09x), res3_branch2a 180 -> 186, res3_branch2c 164 -> 164, res2_branch2c 187 -> 202; strided (NHWC
# formulation before): res5a_branch1 (1024 -> 2048, 14 -> 7) 116 -> 121 and 146 -> 146, res4a_branch1
# (512 -> 1024, 28 -> 14) 125 -> 168 (0.82 -> 1.11x) and 173 -> 190, res3a_branch1 120 -> 153 (1.02 ->
# 1.29x) and 170 -> 198. Batch >= 2 runs "nchw1x1_joint" as before. Intel: the whole set, below.
# "nchw1x1_n49" (with "nchw1x1_a_in_place"): those NCHW 1x1 problems, and the "nchw1x1_joint" ones (batch
# >= 2), with 49 output pixels (the 7 x 7 planes) run their own kernel (conv_f32.c,
# op_conv2d_nchw1x1_n49_f32): 7 weight rows (read in place) x 49 = 3 x 16 + 1 pixels, the 49th as a
# dot product along C, every vector lane busy (the 14 x 32 GEMM kernel: 49 of 64). Other bits than
# the GEMM route for the 49th pixel, the same at every thread count. zen4, 2026-12-01 (same VM, 2
# threads, onepath.bench.core.alternate with settle, median of 7, the bit off/on in one process, GFLOP/s
# off -> on), batch 1: res5a_branch1 116 -> 190, res5_branch2a 128 -> 199, res5_branch2c 162 -> 192;
# `bench conv --desc` runs minutes apart (x torch 2.13, with the bit): batch 1 res5a_branch1 1.32-1.86,
# res5_branch2a 1.19-1.67, res5_branch2c 1.20-1.29; batch 8 (the joint GEMM before) 1.27, 1.11-1.25,
# 1.17-1.18. Intel: the whole set, below.
# "nchw1x1_n49_strided" (with "nchw1x1_n49"): a strided one with 98, 147 or 196 output pixels runs the
# same kernel over runs of 49 pixels per image, packed straight from the input (no sampled-pixel
# copy, no 4-of-32-column panel). zen4, 2026-12-01 (as above, onepath.bench.core.alternate with
# settle), res4a_branch1 (512 -> 1024, 28 -> 14): batch 1 172 -> 184, 172 -> 191 (1.13 -> 1.21x,
# 1.16 -> 1.29x), 141 -> 161; batch 8 149 -> 160, 145 -> 152 (1.03 -> 1.11x, 1.00 -> 1.05x). The
# stride-1 196-pixel layers measured mixed (res4_branch2a 149 -> 136, res4_branch2c 196 -> 177 at
# batch 1; +3% / -2% at batch 8): they keep their routes.
# sapphirerapids (the Intel AMX VM, 2026-12-03, 2 threads, ResNet-50's 23 layers at batch 1 and 8, NCHW
# and NHWC, paired in one process with torch 2.13, median of 5): the same set with CONV_STEM_OPTIONS
# "stem_f32" and CONV_NCHW_AS_NHWC's zen4 limits, against none of them, geomean x torch (layers
# below 0.85x): batch 1 NCHW 1.19 (2) -> 1.37 (0), NHWC 1.03 (3) -> 1.13 (0); batch 8 NCHW 1.03 (6) ->
# 1.17 (3), NHWC 0.94 (5) -> 1.00 (1). Dropping "nchw1x1_joint" or the NHWC-form limits on the weak
# batch-8 layers (res2_branch2b, res4a_branch1, res5_branch2a: 0.72-0.79x) changed them by under 4%.
# "ukr_a_far_prefetch": the micro-kernel that reads an NHWC 1x1 input (or an NCHW 1x1 weight) in
# place (conv_f32.c, op_conv_ukr_a_f32), at depth blocks over 128, fetches its own rows two lines
# ahead into L1 and the panel after next into L2, instead of the whole next panel into L1 (which,
# beside the 32 KiB B panel, overflowed a 48 KiB L1d). sapphirerapids (the Intel AMX VM, 2026-12-04,
# paired with torch 2.13, the builds before / after alternated in one process): see that kernel;
# NCHW batch 8 1x1 layers unchanged (geomean 1.150 -> 1.152x torch). Not measured on Zen 4 (32 KiB
# L1d, the same 32 KiB B panel): no row there until it is.
# "as_nhwc_image": an NCHW k x k convolution that CONV_NCHW_AS_NHWC routes through the NHWC
# formulation, at a batch of at least the threads (and 2), with at least 784 output pixels per image
# (OP_CONV_IMG_MIN_PIXELS: the NHWC kernel packs the weight once per image here; batch 8 3x3 layers
# on 7 x 7 outputs with C 96-256 ran 0.77-0.85x the whole-batch route, found by the fresh-user
# review), whose one-image working set (its NHWC copy and output and the weight, float32) is at most
# 2 MiB (kernels/conv_f32.c, OP_CONV_IMG_L2: ResNet-50's res2_branch2b 1.75 MiB, res3_branch2b 1.39
# MiB; res3a_branch2b and the 14 x 14 and 7 x 7 layers are larger), runs image by image: each thread
# transposes an image in, runs the NHWC kernel on it alone and transposes it back, the image's NHWC
# tensors staying in its L2 (perf before: the two batch-sized transposes through memory were 15% of
# res2_branch2b at batch 8). The same bits. sapphirerapids (the Intel AMX VM, 2 MiB L2, 2026-12-04,
# batch 8, paired with torch 2.13, the bit off / on alternated in one process, median of 7, x
# torch): 2 threads res2_branch2b 0.84 -> 0.97, 0.77 -> 0.92, 0.81 -> 0.91, 0.79 -> 0.91,
# res3_branch2b 0.98 -> 1.05, 0.94 -> 1.08, 0.99 -> 1.03; 1 thread res2_branch2b 0.75 -> 0.96, 0.81
# -> 0.95, 0.80 -> 0.90, res3_branch2b 0.87 -> 1.04, 0.98 -> 1.03. The other layers take other
# routes (unchanged). Not measured on Zen 4 (1 MiB L2: res2_branch2b's image does not fit it): no
# row.
_CONV_F32_SHARED = ("brg_full_k", "brg_nsplit", "brg_ow7", "brg_nsplit_pack", "brg_wide_rows",
                    "brg_skip_pad", "nchw1x1_direct_b", "nchw1x1_joint", "nchw1x1_a_in_place",
                    "nchw1x1_n49", "nchw1x1_n49_strided")
# "nhwc_direct8" (the avx2 module only): an NHWC convolution (groups 1, C >= 16; 1x1 with a stride
# only onto planes of at most 49 pixels) reads its input in place of the im2col pack / the GEMM's
# A pack, 6 pixels x 16 output channels per register tile (kernels/conv_f32.c,
# op_conv2d_nhwc_d8_f32 and op_conv_d8_fits, with the measurements). zen3 (AMD EPYC Zen 3 VM, 2
# cores, 2026-12-06, paired with torch 2.13 in one process): ResNet-50's 3x3 layers in NHWC at 1 and
# 2 threads, faster than the im2col GEMM on every one (0.74 -> 0.91x torch at res2_branch2b batch 8,
# 1 thread; 0.83 -> 1.11x at 2 threads); its 1x1 layers mostly faster or even.
CONV_F32_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    # zen3: "nchw1x1_joint" with "nchw1x1_joint_small" (the joint GEMM only for strided 1x1 problems
    # and planes of at most 196 pixels; measurements at OP_CONV_NCHW1X1_JOINT_SMALL in
    # kernels/conv_f32.c): at batch 8 res5a_branch1 0.74 -> 1.07x torch, res3a_branch1 0.79 -> 1.14.
    ("zen3", "avx2"): ("nhwc_direct8", "nchw1x1_joint", "nchw1x1_joint_small"),
    ("zen4", "avx512_core"): _CONV_F32_SHARED,
    ("sapphirerapids", "avx512_core"): _CONV_F32_SHARED + ("ukr_a_far_prefetch", "as_nhwc_image"),
}
CONV_F32_FLAGS = {"brg_full_k": 1, "brg_nsplit": 2, "brg_ow7": 4, "brg_nsplit_pack": 8,
                  "brg_skip_pad": 16, "brg_wide_rows": 64,
                  "nchw1x1_direct_b": 256, "nchw1x1_joint": 512, "nchw1x1_a_in_place": 1024,
                  "nchw1x1_n49": 2048, "nchw1x1_n49_strided": 4096,
                  "ukr_a_far_prefetch": 8192,
                  "as_nhwc_image": 16384, "nhwc_direct8": 32768,
                  "nchw1x1_joint_small": 65536}  # the bits of op_conv_f32_options


# Direct convolution for few input channels (kernels/conv_stem.c, op_conv_stem_options): groups 1,
# C <= 4, KH, KW >= 3, dilation 1 (the ResNet-50 7x7 stride-2 stem, K = 147), computed from a padded,
# stride-phase-split copy of the input instead of gathering 147-deep patches for the GEMM.
# "stem_f32": op_conv2d_f32 (FMA; also bfloat16 input widened at levels without BF16 instructions);
# "stem_bf16": op_conv2d_bf16 (VDPBF16PS on kx-paired taps). Per (uarch, level of the module); a host
# without a row keeps the implicit GEMM.
# zen4: measured 2026-11-30 on an AMD EPYC Zen 4 VM (2 cores, shared: 2-thread timings bimodal),
# ResNet-50 conv1 (mb1/mb8 ic3ih224oc64oh112kh7sh2ph3), the route off/on alternated in one process
# with torch 2.13 (onepath.bench.core.alternate, median of 5), onepath GFLOP/s before -> after:
# 1 thread mb1 f32 NCHW 97 -> 102, f32 NHWC 90 -> 105 (torch 111), bf16 NCHW 123 -> 169, bf16 NHWC
# 164 -> 174 (torch 163); 2 threads mb1 f32 NCHW 188 -> 190 (torch 207), f32 NHWC 177 -> 198 (209),
# bf16 NCHW 236 -> 311 (282), bf16 NHWC 311 -> 328 (314); 2 threads mb8 f32 NHWC 163 -> 184 (199),
# bf16 NCHW 194 -> 213, bf16 NHWC 293 -> 333 (313). Intel: "stem_f32" only (below).
# Re-measured 2026-11-30 after the per-thread band copies (same host, 2 threads, `bench conv
# --desc`, GFLOP/s, x torch 2.13; torch's f32 NCHW ran at 72 in those runs): mb1 f32 NCHW 195,
# NHWC 204 (0.95), bf16 NCHW 280 (1.10), NHWC 314 (1.00); mb8 f32 NCHW 191, NHWC 206 (0.96), bf16
# NCHW 318 (1.14), NHWC 344 (1.04).
CONV_STEM_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("zen4", "avx512_core"): ("stem_f32",),
    # sapphirerapids float32: measured with CONV_F32_OPTIONS (there): conv1 batch 1 NCHW 0.86 -> 1.02x
    # torch, NHWC 0.75 -> 0.91x, batch 8 NHWC 0.65 -> 0.80x. Not at its AMX level: "stem_bf16" (a
    # VDPBF16PS kernel) ran conv1 at 135-180 GFLOP/s there against 545-710 on the AMX tiles.
    # "stem_nt": an NHWC float32 output over 2 MiB written with non-temporal stores, whole lines (an
    # output that size leaves the writing cores' L2 soon anyway; read-for-ownership and line
    # prefetches were a tenth of the time). sapphirerapids (the Intel AMX VM, 2026-12-05, conv1 NHWC
    # float32, the bit off / on alternated in one process beside torch 2.13, median of 7, GFLOP/s, x
    # torch): batch 8 1 thread 141 -> 156 (0.95 -> 1.05), 2 threads 311 -> 329 (0.88 -> 0.94); batch
    # 1 153 -> 163 (0.89 -> 0.95), 295 -> 311 (0.88 -> 0.93); `bench conv --desc`, 2 threads: batch
    # 8 0.81-0.84 -> 0.90-0.91, batch 1 0.90. Not measured on Zen 4: no row there until it is.
    ("sapphirerapids", "avx512_core"): ("stem_f32", "stem_nt"),
    ("zen4", "avx512_core_bf16"): ("stem_f32", "stem_bf16"),
    # zen3 (AMD EPYC Zen 3 VM, 2 cores, 2026-12-06): the AVX2 tile (6 pixels x 16 channels), conv1
    # off / on alternated in one process beside torch 2.13 (onepath.bench.core.alternate, median
    # of 5), GFLOP/s (x torch): 1 thread batch 1 NCHW 63.2 -> 72.2 (0.79 -> 0.91), NHWC 64.4 ->
    # 81.6 (0.74 -> 0.94), batch 8 NCHW 76.1 -> 79.6 (0.90 -> 0.94), NHWC 66.1 -> 86.3 (0.76 ->
    # 1.00); 2 threads batch 1 NCHW 107 -> 118 (0.78 -> 0.85), NHWC 82 -> 113 (0.81 -> 1.12),
    # batch 8 NCHW 84 -> 98 (0.72 -> 0.84), NHWC 76 -> 113 (0.72 -> 1.07).
    ("zen3", "avx2"): ("stem_f32",),
}
CONV_STEM_FLAGS = {"stem_f32": 1, "stem_bf16": 2, "stem_nt": 4}  # the bits of op_conv_stem_options


def conv_stem_flags(level: str, uarch: str | None = None) -> int:
    """The ``op_conv_stem_options`` bit set for the module of ``level`` on ``uarch`` (default: this
    host's), from ``CONV_STEM_OPTIONS`` (0 without a row)."""
    if uarch is None:
        uarch = _probe().uarch
    return sum(CONV_STEM_FLAGS[o] for o in CONV_STEM_OPTIONS.get((uarch, level), ()))


def conv_f32_flags(level: str, uarch: str | None = None) -> int:
    """The ``op_conv_f32_options`` bit set for the module of ``level`` on ``uarch`` (default: this
    host's), from ``CONV_F32_OPTIONS`` (0 without a row)."""
    if uarch is None:
        uarch = _probe().uarch
    return sum(CONV_F32_FLAGS[o] for o in CONV_F32_OPTIONS.get((uarch, level), ()))



# Options of the bfloat16 convolutions (kernels/conv_bf16.c, op_conv_bf16_options), per (uarch, level of
# the module): "brg" runs an NHWC k x k convolution (also an NCHW one computed in the NHWC formulation)
# whose geometry fits (groups 1, C/g a multiple of 32, OW a multiple of 7) on the batch-reduce
# VDPBF16PS kernel (op_conv2d_nhwc_brg_bf16): its padded input read in place (no packed copy of A),
# all of K summed in registers. A host without a row runs
# the NHWC GEMM over the packed gather.
# zen4: measured 2026-11-30 on an AMD EPYC Zen 4 VM (2 cores, shared: +-10% noise), ResNet-50 batch 8,
# paired in one process with torch 2.13 (2 threads): NHWC res2_branch2b 0.87 -> 0.92x torch,
# res3_branch2b 0.89 -> 0.96, res4_branch2b 0.92 -> 0.95, res5_branch2b 0.89 -> 0.94; NCHW through
# the NHWC formulation (CONV_NCHW_AS_NHWC) res5_branch2b 0.81 -> 0.86-0.89; at 1 thread (perf)
# res2_branch2b NHWC 176 -> 201 GFLOP/s (the A pack, 8% of the time, gone; the micro-kernel 78 -> 89%).
# Strided 1x1 NHWC (res3a_branch1) 7% faster than the GEMM over the gathered A; stride-1 1x1 layers
# were 3-40% slower on this kernel (few K blocks per call): they stay GEMMs (op_brgb_fits).
# "skip_pad": that kernel leaves out the kernel rows that fall in the H padding of an output row, per
# 32-column weight panel whose weights are all finite (checked while the panel is packed; a panel with
# an Inf or NaN weight runs every kernel row, so 0 * Inf = NaN reaches the border outputs as at every
# level; for finite weights the skipped taps only added exact zeros: the same bits).
# zen4, same VM, 2 threads, paired with torch 2.13 (median of 7), GFLOP/s "brg" -> "brg" + "skip_pad":
# NHWC batch 1 res5_branch2b 334 -> 361 (1.26 -> 1.36x torch), res4_branch2b 405 -> 422, res3_branch2b
# 409 -> 423, res2_branch2b 408 -> 413; NCHW batch 8 (NHWC formulation) res5_branch2b 417 -> 459
# (0.84 -> 0.92x), res4_branch2b 436 -> 460, res3a_branch2b 374 -> 383.
# "brg_nsplit_pack": where that kernel's threads split the output channels (a weight larger than the
# padded input), each task packs its 32-column weight panel (K x 32 bfloat16, in L2) right before using
# it, in its thread's slot, instead of one pass packing the whole weight first (6.8% of res5_branch2b
# batch 8 NCHW in perf, the packed 4.5 MiB written out and read back). zen4, same VM and method (median
# of 7), GFLOP/s "brg" + "skip_pad" -> with "brg_nsplit_pack": batch 8 NCHW res5_branch2b 394 -> 447
# (0.82 -> 0.92x torch), res5a_branch2b 346 -> 388 (0.83 -> 0.93x), res4_branch2b 409 -> 421; batch 8
# NHWC res5_branch2b 397 -> 453; batch 1 NHWC res4_branch2b 342 -> 393, res5a_branch2b 191 -> 317.
# "1x1_out16": an NHWC 1x1 stride-1 unpadded convolution with a bfloat16 output (C / groups a
# multiple of 32) runs the GEMM's in-place-A kernel writing bfloat16 straight from its registers
# (no float tile rounded by the driver per 14 x 32 tile), the same bits. zen4, same VM, 2 threads,
# batch 8 NHWC, paired in one process with torch 2.13 (median of 7), GFLOP/s without -> with:
# res2_branch2c 333 -> 398 (0.77 -> 0.92x torch), res2a_branch2a 326 -> 370 (0.81 -> 0.92x),
# res3_branch2c 365 -> 417 (0.85 -> 0.97x).
# "1x1_strided_ref": an NHWC strided unpadded 1x1 convolution (groups 1, C a multiple of 32, OW a
# multiple of 14, all of K in one KC block) runs one GEMM whose 14-row A micro-panels point at the
# sampled input pixels in place (one output row's pixels, sw*C apart; no gathered copy) with the
# bfloat16 write-out from the registers, instead of the "brg" kernel; the same bits. zen4, same VM,
# 2 threads, paired in one process (median of 7), GFLOP/s "brg" -> "1x1_strided_ref" (the GEMM over the
# gathered copy beside it): res3a_branch1 batch 8 364 -> 398 (378), batch 1 402 -> 426 (410);
# res4a_branch1 batch 1 403 -> 420 (415).
# "1x1_out16_conv": with "1x1_out16", the full 14-row panels run the conv's own in-place-A kernel
# (op_conv_ukr16_a_dp: five row bases, the next panel's rows prefetched, no B prefetch; the same
# VDPBF16PS order and bfloat16 write-out from the registers) instead of the GEMM's; the same bits.
# zen4, same VM, 2 threads, paired in one process (median of 7), GFLOP/s without -> with: batch 8
# res2a_branch2a 374 -> 400, res2_branch2c 397 -> 411, res3_branch2c 416 -> 430, res2_branch2a
# 424 -> 435, res5_branch2c 424 -> 435, res3_branch2a 438 -> 441; batch 1 res2a_branch2a 317 -> 342,
# res2_branch2c 367 -> 388, res3_branch2c 349 -> 359, res4_branch2c 399 -> 395 (noise).
# "brg_inplace" (with "skip_pad"): that kernel reads a padded NHWC input in place instead of its
# padded copy (the H padding rows skipped as above, a W padding tap of a border pixel reading a line of
# zeros: the same products, the same bits), when the padding is at most one pixel per side and the
# weight is packed in one pass and all finite (else the copy). zen4, same VM, 2 threads, paired in one
# process with torch 2.13 (median of 40-90 rounds), us/call "brg" + "skip_pad" + "brg_nsplit_pack" ->
# with "brg_inplace": NHWC res2_branch2b batch 1 578 -> 555 (0.97 -> 1.01x torch), batch 8 4369 ->
# 4192 (0.93 -> 0.97x), res3a_branch2b batch 8 4981 -> 4473 (0.87 -> 0.97x), res3_branch2b batch 8
# 4129 -> 4084 (0.95 -> 0.96x); batch 1 res3_branch2b / res4_branch2b and batch 8 res4_branch2b (the
# output-channel split, per-task packs: the copy) unchanged.
# "as_nhwc_image": an NCHW k x k convolution in the NHWC formulation (CONV_NCHW_AS_NHWC) with a batch of
# at least the threads and a weight no larger than one image's padded NHWC copy runs image by image,
# each thread whole images on its own (transpose in, the batch-reduce kernel, transpose out), instead
# of three whole-batch passes on all threads through the shared L3; the same bits. zen4, same VM, 2
# threads, batch 8, paired with torch 2.13 in one process (median of 10 rounds), x torch whole-batch
# route -> image by image (res2_branch2b: the NCHW GEMM -> image by image, "kxk_batch"), separate
# processes minutes apart (some with the input and heap shifted per round), median of 10-12 rounds:
# res2_branch2b 0.87-0.90 -> 0.97-0.99 (worst round 0.92); res3a_branch2b 0.79-0.91 -> 0.89-0.96 (the
# lower figures in the shared L3's slow state, scripts/place_sweep.py, where the whole-batch route lost
# most), 0.87 -> 0.95 twice with the weight packed once per call; at 1 thread res2_branch2b 0.89 -> 0.99,
# res3a_branch2b 0.92 -> 0.97. res3_branch2b and smaller planes (a weight larger than an image) keep
# the whole-batch route, unless:
# "as_nhwc_image_l2": with "as_nhwc_image", a weight larger than an image also runs image by image when
# one thread's packed weight, padded NHWC image and NHWC output (bfloat16) fit 768 KiB of its L2
# (res3_branch2b, 28x28: 288 + 225 + 196 KiB; res4 and res5 do not fit); the same bits. zen4, same VM,
# 2 threads, batch 8 NCHW, paired with torch 2.13 in one process (median of 7-11 rounds, settle between
# callables; three processes minutes apart), GFLOP/s without -> with: res3_branch2b 375 -> 392 (0.94 ->
# 0.99x torch), 355 -> 397 (0.85 -> 0.95x), 366 -> 418 (0.83 -> 0.95x).
# "nchw1x1_joint": an NCHW 1x1 stride-1 unpadded convolution (groups 1, batch >= 2, C >= 1024) whose per-image GEMM
# leaves a ragged last 32-column panel (at least 1/16 of the panel columns empty: 14x14 planes, 196
# pixels in 7 panels) runs as one GEMM over the pixels of all images (op_conv2d_bf16_nchw1x1_joint, as
# float32's CONV_F32_OPTIONS "nchw1x1_joint"), its float C rounded once afterwards; the same bits.
# zen4, same VM, 2 threads, batch 8, paired with torch 2.13 in one process (median of 7-15 rounds,
# settle between callables), GFLOP/s without -> with: res5a_branch2a (C 1024 -> 512) 332 -> 362
# (1.00 -> 1.09x torch), 354 -> 387 (0.96 -> 1.05x), 302 -> 355 and 333 -> 326 (noisy runs);
# res4_branch2a (1024 -> 256) 344 -> 389 (1.02 -> 1.16x), 309 -> 347, 326 -> 369; onepath at 1 thread
# res5a_branch2a 168 -> 187. res4_branch2c (C 256 -> 1024) measured 260 -> 247 and 306 -> 283 (the
# float C pass costs too much beside 256 products per output: C >= 1024 only); 56x56 and 28x28 planes
# (no ragged edge worth it) 2-10% slower: not taken.
# "brg_nsplit_small": with "brg_nsplit_pack", a packed weight of at most 512 KiB is packed in one pass
# first (checked finite before the run), so "brg_inplace" reads the input in place instead of its
# padded copy; larger weights keep the per-task packs; the same bits. zen4, same VM, 2 threads, paired
# with torch 2.13 in one process (median of 11, settle between callables), GFLOP/s without -> with:
# NHWC batch 1 res3_branch2b 421 -> 430 (1.01 -> 1.03x torch), 424 -> 437 (1.00 -> 1.03x); NCHW batch 1
# (NHWC formulation, its input copied anyway) 417 -> 416.
# "amx_s1" (AMX builds): an NHWC stride-1 k x k convolution (groups 1, C a multiple of 32, OW at
# least 4 (KW-1) DW) runs op_conv2d_nhwc_amx_s1: the AMX tiles read their A rows per kernel tap in
# place from a zero-padded copy of the input (the output on the padded width, (KW-1) DW columns per
# row dropped) instead of the GEMM over the packed gather; the weight packed by the same pack, the
# same depth order and single sums: the same bits where the GEMM route's KC block holds all of K
# (with K split over KC blocks its edge tiles round each block's sum into C: float rounding apart).
# sapphirerapids, 2026-12-03 (the Intel AMX VM, 2 threads, paired in one process with torch 2.13,
# median of 5, GFLOP/s without -> with, x torch): NHWC batch 8 res2_branch2b 932 -> 1408 (0.52 ->
# 0.79x), res3_branch2b 1048 -> 1490 (0.42 -> 0.60x), res4_branch2b 1111 -> 1563 (0.69 -> 0.98x);
# batch 1 res2_branch2b 848 -> 1253 (0.65 -> 0.96x), res3_branch2b 816 -> 1245 (0.69 -> 1.06x),
# res4_branch2b 549 -> 822; res5 (7x7: OW < 8) and the strided layers keep the GEMM. The NCHW layers
# through the NHWC formulation with it measured slower than without (CONV_NCHW_AS_NHWC: no row). The
# VDPBF16PS options above all ran slower at the AMX level (0.1-0.6x): not taken there.
# Since 2026-12-04 each amx_s1 task copies the padded rows its pixel blocks read into its thread's own
# buffer (instead of one whole-batch copy both threads fill and read) and a block's write-out (one
# pass, epilogue and rounding) overlaps the next block's tile products: same VM, NHWC batch 8
# res2_branch2b 2 threads 1752 -> 2713 GFLOP/s (0.64 -> 0.96x torch), 1 thread 1177 -> 1466 (0.82 ->
# 1.00x); res3_branch2b 2160 -> 2747 (0.58 -> 0.73x) and 1224 -> 1465 (0.60 -> 0.71x). The same bits.
# Since 2026-12-05 the weight panel's depth runs in chunks (36 KiB of it at stride 1, 18 KiB at
# stride 2: OP_AMXC_KCHUNK_S1 / _S2 in kernels/conv_bf16.c) that stay in L1 while every pixel block
# of the task passes, partial sums kept in float32 between chunks: same VM, NHWC batch 8 2 threads
# res3_branch2b 0.73 -> 0.81-0.86x torch, res3a_branch2b 0.94-0.95 -> 1.00-1.03x. The same bits.
# "amx_stem" (AMX builds): an NHWC convolution with few input channels (groups 1, dilation 1, KH, KW
# >= 3, C < 32, 8 <= C KW <= 32: ResNet-50's 7x7 stride-2 stem) runs op_conv2d_nhwc_amx_stem: per
# kernel row, one A tile of 16 output pixels x 32 depths read in place from a padded copy of the
# input (rows SW C elements apart; depths past C KW meet zero weight rows, so a band of rows holding
# an Inf or NaN reads its windows from zero-filled copies instead: the same bits elsewhere). sapphirerapids, 2026-12-04 (the Intel AMX VM, paired with torch 2.13 in one
# process, GFLOP/s GEMM route -> amx_stem, x torch): conv1 NHWC batch 8, 2 threads 770 -> 1837
# (0.37 -> 0.87x), 1 thread 474 -> 991 (0.45 -> 0.85x); batch 1, 2 threads 907 -> 1496 (0.55 ->
# 0.90x). Other bits than the GEMM route (kernel-row order of the sums).
# "amx_s2" (AMX builds): the amx_s1 kernel for stride 2 along H and W (dilation 1, at least 128
# output pixels per image), its copy split into four phase planes (even / odd rows x even / odd
# columns) so that every tap's A tile is again one load of consecutive pixels; the same pack, depth
# order and sums as the GEMM route: the same bits. sapphirerapids, 2026-12-04 (the Intel AMX VM, 2
# threads, paired with torch 2.13, median of 5, x torch without -> with): NHWC batch 8
# res3a_branch2b (56x56 -> 28x28) 0.59 -> 0.88, res4a_branch2b 0.77 -> 0.98; batch 1 1.28 -> 1.54,
# 1.09 -> 1.32; res5a_branch2b (7x7 output) measured slower on it (1.77 -> 1.59): below the 128
# pixels, kept on the GEMM.
CONV_BF16_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("zen4", "avx512_core_bf16"): ("brg", "skip_pad", "brg_nsplit_pack", "1x1_out16", "brg_inplace",
                                    "1x1_strided_ref", "1x1_out16_conv", "as_nhwc_image", "as_nhwc_image_l2",
                                    "nchw1x1_joint", "brg_nsplit_small"),
    ("sapphirerapids", "avx512_core_amx"): ("amx_s1", "amx_stem", "amx_s2"),
}
CONV_BF16_FLAGS = {"brg": 1, "skip_pad": 2, "brg_nsplit_pack": 4, "1x1_out16": 8, "brg_inplace": 16,
                   "1x1_strided_ref": 32, "1x1_out16_conv": 64,
                   "as_nhwc_image": 128, "as_nhwc_image_l2": 256, "nchw1x1_joint": 512,
                   "brg_nsplit_small": 1024, "amx_s1": 2048, "amx_stem": 4096, "amx_s2": 8192}  # the bits of op_conv_bf16_options


def conv_bf16_flags(level: str, uarch: str | None = None) -> int:
    """The ``op_conv_bf16_options`` bit set for the module of ``level`` on ``uarch`` (default: this
    host's), from ``CONV_BF16_OPTIONS`` (0 without a row)."""
    if uarch is None:
        uarch = _probe().uarch
    return sum(CONV_BF16_FLAGS[o] for o in CONV_BF16_OPTIONS.get((uarch, level), ()))

# Depthwise 3x3 NCHW: where the row-register kernels (kernels/conv_dw.c op_dw3_s1r / op_dw3_s2r / op_dw3_s2w,
# op_conv_desc.dw_rows = 1) replace the default choice of the AVX-512 builds, per (uarch, level): the
# smallest input width W per (stride, input dtype); a missing key keeps the default. Zen 4 (family 25
# model 17, KVM guest, 2 cores), 2026-11-30, kernel-only best-of timings at 1 thread, this shared host:
# stride 1 float32 W 112 / 56 1.33x / 1.35x faster than the whole-row kernel (op_dw3_rowv, whose lane
# shifts share Zen 4's FMA pipes), W 28 equal, W 14 0.84x; stride 2 float32 and bfloat16 W 112 / 56 /
# 28 1.2-1.37x faster than op_dw3_plane, W 14 (the phase-plane kernel) 0.83x / 1.04x; bfloat16 stride 1
# (the kernel takes rows of 9..16 columns only: the plane widened once, then whole rows) W 14 1.08x
# faster than the flat kernel at 2 threads (W 28: 0.85x, hence the cap). Intel: its row below.
# A key ending in "_narrow" gives the largest input width for the same request, met by the
# one-256-bit-vector-per-row kernel (op_dw3_r8, stride 1, rows of <= 8 columns). Zen 4, 2026-11-30,
# kernel-only best-of at this shared host: 7x7 planes (MobileNet-v2 C960) float32 2.2-2.3x faster
# than the flat kernel at 1 and 2 threads (29.8 -> 13.3 us, 16.5 -> 7.5 us), bfloat16 1.4-1.45x
# (27.4 -> 18.9 us, 15.0 -> 10.5 us). Stride 2, input rows of <= 16 columns and left padding 1
# (op_dw3_s2n, other paddings keep the default): 14x14 -> 7x7 (C576) 1.6-1.8x faster than the
# phase-plane kernel at 1 and 2 threads (f32 25.0 -> 15.9 us, 17.5 -> 10.8; bf16 27.0 -> 15.3, 18.9 -> 10.6).
# A key ending in "_max_batch" caps the batch for the wide rows of the same request (the "_narrow"
# rows keep no cap). Zen 4, 2026-12-01, kernel-only best-of 7 at 2 threads, this shared host, batch 8
# (inputs of 13-14 MB, streamed from memory: op_dw3_s1r keeps R + 2 = 10 input and 8 output rows in
# flight, the whole-row kernel 3 + 1 or 4 + 2): stride 1 float32 MobileNet-v2 112x112 C32 op_dw3_s1r
# 99.6 -> whole rows 140.2 GFLOP/s, 56x56 C144 70.2 -> 97.3; at batch 1 op_dw3_s1r stays (112x112
# C32 165 vs 150 GFLOP/s, 56x56 C144 137-141 vs 136-145: even).
DW_ROW_KERNELS: dict[tuple[str, str], dict[str, int]] = {
    ("zen4", "avx512_core"): {"s1_float32": 56, "s1_bfloat16": 9, "s2_float32": 28, "s2_bfloat16": 28,
                              "s1_float32_narrow": 8, "s1_bfloat16_narrow": 8,
                              "s2_float32_narrow": 16, "s2_bfloat16_narrow": 16,
                              "s1_float32_max_batch": 1, "s1_bfloat16_widen": 65},
    # sapphirerapids (the Intel AMX VM, 2 cores), 2026-12-04, 2 threads, MobileNet-v2 layers NCHW
    # paired in one process with torch 2.13 (median of 7, x torch default -> row): the stride-2 row
    # kernels from 28 columns and the 256-bit narrow-row kernels: batch 1 float32 dw2 (112x112 s2)
    # 3.37 -> 4.81, dw4 3.97 -> 6.09, dw6 3.94 -> 5.18, dw9 (14x14 -> 7x7) 3.47 -> 5.46, dw10 (7x7)
    # 3.29 -> 5.69 (kernel call 17.2 -> 9.9 us); bfloat16 dw2 3.07 -> 4.24, dw9 3.55 -> 5.97, dw10
    # 3.57 -> 4.79; batch 8 alike (float32 dw9 2.30 -> 4.38, dw10 1.72 -> 2.74). Not taken here:
    # zen4's stride-1 float32 rows from 56 columns (op_dw3_s1r; dw3 56x56 3.37 -> 2.67) and its
    # bfloat16 stride-1 row kernels (9..16 columns and widened planes: even within noise).
    ("sapphirerapids", "avx512_core"): {"s2_float32": 28, "s2_bfloat16": 28, "s1_float32_narrow": 8,
                                        "s1_bfloat16_narrow": 8, "s2_float32_narrow": 16,
                                        "s2_bfloat16_narrow": 16},
}
# "s1_bfloat16_widen": the smallest input width at which a bfloat16 stride-1 request (already asking
# for the row kernels) also sets op_conv_desc.dw_rows bit 2: each plane widened once into float32
# scratch, then op_dw3_s1r's rows (op_dw3_s1r_w) instead of the even / odd kernel (rows of more than
# 64 columns). Zen 4, 2026-12-01, this shared host, bfloat16 in and out, MobileNet-v2 112x112 C32:
# kernel-only best-of 15 at 2 threads through onepath's numpy operands, batch 1, two runs 91.4 / 91.4
# -> 107.8 / 107.5 GFLOP/s; batch 8 (best-of 9) 109.9 / 111.5 -> 118.2 / 118.3; 1 thread 56.5 ->
# 61.4. 56x56 C144 (against the flat kernel) was even (81.5 / 79.5 -> 78.3 / 80.9): not taken.
# Intel (sapphirerapids): not taken (see its DW_ROW_KERNELS row).


def dw_row_kernels(row: Kernel, stride: tuple[int, int], w: int, x_bf16: bool,
                   uarch: str | None = None, n: int = 1) -> bool:
    """Whether a depthwise NCHW problem on conv ``row`` (``stride`` (sh, sw), input width ``w``,
    bfloat16 input when ``x_bf16``, batch ``n``) asks for the row-register 3x3 kernels on ``uarch``
    (default: this host's), per ``DW_ROW_KERNELS``: ``w`` at least the key's width (and ``n`` at most
    its ``_max_batch`` where it has one), or at most its ``_narrow`` width (the kernel still checks
    that the geometry fits them)."""
    if row.algorithm != "depthwise" or stride not in ((1, 1), (2, 2)):
        return False
    if uarch is None:
        uarch = _probe().uarch
    lim = DW_ROW_KERNELS.get((uarch, row.level))
    if lim is None:
        return False
    key = f"s{stride[0]}_{'bfloat16' if x_bf16 else 'float32'}"
    wide = key in lim and w >= lim[key] and n <= lim.get(key + "_max_batch", n)
    return wide or w <= lim.get(key + "_narrow", 0)


def dw_row_flags(row: Kernel, stride: tuple[int, int], w: int, x_bf16: bool,
                 uarch: str | None = None, n: int = 1) -> int:
    """``op_conv_desc.dw_rows`` for a depthwise NCHW problem (arguments as ``dw_row_kernels``): bit 1
    when ``dw_row_kernels`` asks for the row-register kernels, plus bit 2 for a bfloat16 stride-1
    input at least ``DW_ROW_KERNELS``' ``s1_bfloat16_widen`` wide (the plane widened once, then
    float32 rows); 0 for neither."""
    if not dw_row_kernels(row, stride, w, x_bf16, uarch, n):
        return 0
    lim = DW_ROW_KERNELS.get((uarch or _probe().uarch, row.level), {})
    widen = x_bf16 and stride == (1, 1) and w >= lim.get("s1_bfloat16_widen", w + 1)
    return 1 | (2 if widen else 0)


def blocking_for(row: Kernel, caches: dict, elem_size: int | None = None) -> tuple[int, int, int]:
    """Derive (MC, KC, NC) from cache sizes in bytes, after the BLIS analytical model
    (Low et al., "Analytical Modeling Is Enough for High-Performance BLIS", ACM TOMS 43(2), 2016):
    the KC x NR micro-panel of B takes about two thirds of L1 (the rest holds the A micro-panel and
    the C tile), the MC x KC block of A about a twelfth of L2 (it is re-read for every NR panel while
    B streams past it), and the KC x NC panel of B a quarter of L3, capped at 3072 columns.
    Sizes count packed bytes: ``elem_size`` (default ``row.elem_bytes``: 4 for float32 panels, 2 for
    the native bfloat16 ones), KC a multiple of ``row.k_align`` (and of 16), kept between 512 and
    1536 bytes of depth (128..384 float32, 256..768 bfloat16).
    On a 48 KiB L1 / 2 MiB L2 core with the 14x32 float32 kernel this gives MC 168, KC 256, NC 3072,
    which a sweep on this project's Sapphire-Rapids-class host measured best or tied; on Zen 4
    (32 KiB L1d, 1 MiB L2) the bfloat16 14x32 kernel gets KC 320 (a 20 KiB B micro-panel) instead of
    the 512 (32 KiB, all of L1d) that was hard-coded before, though a paired measurement on Zen 4
    still preferred 512 for the GEMM (its shipped ``TUNING`` row).
    """
    e = elem_size or row.elem_bytes or 4
    l1 = caches.get("l1d") or 32 * 1024
    l2 = caches.get("l2") or 256 * 1024
    l3 = caches.get("l3") or 8 * 1024 * 1024
    step = max(16, row.k_align)
    kc = (l1 * 2 // 3) // (row.nr * e) // step * step
    kc = max(-(-512 // e // step) * step, min(1536 // e // step * step, kc))
    mc = max(row.mr, (l2 // 12) // (kc * e) // row.mr * row.mr)
    nc = max(row.nr, min(3072, (l3 // 4) // (kc * e)) // row.nr * row.nr)
    return mc, kc, nc


def rows(op: str | None = None, dtype: str | None = None) -> tuple[Kernel, ...]:
    """Registry rows, optionally filtered by op and dtype, fastest first."""
    return tuple(r for r in REGISTRY if (op is None or r.op == op) and (dtype is None or r.dtype == dtype))


def _fit(row: Kernel, mc: int, kc: int, nc: int) -> dict:
    """A tuning row's blocking as the GEMM driver runs it: MC rounded up to a multiple of MR, NC of
    NR, KC of the packing depth granule (kernels/gemm_f32.c, op_gemm_drive)."""
    up = lambda v, q: -(-max(1, v) // q) * q  # noqa: E731
    return {"mc": up(mc, row.mr), "kc": up(kc, row.k_align), "nc": up(nc, row.nr)}


def _blocked(row: Kernel, uarch: str, caches: tuple, live: bool) -> Kernel:
    """``row`` with MC/KC/NC: the live host's tuning file, else a shipped TUNING row for ``uarch``,
    else the cache model (the row's own values where the table gives them)."""
    key = (row.level, row.op, row.dtype)
    if row.algorithm == "depthwise":  # a direct kernel: takes no cache blocking
        mc, kc, nc = blocking_for(row, dict(caches))
        return replace(row, mc=mc, kc=kc, nc=nc, blocking_from="unused")
    if live:
        from . import tuning
        tuned = tuning.rows().get(key)
        if tuned is not None:
            return replace(row, **_fit(row, *tuned), uarch=uarch, blocking_from="tuning file")
    tuned = TUNING.get((uarch,) + key)
    if tuned is not None:
        return replace(row, **_fit(row, *tuned), uarch=uarch, blocking_from="shipped")
    mc, kc, nc = blocking_for(row, dict(caches))
    return replace(row, mc=row.mc or mc, kc=row.kc or kc, nc=row.nc or nc, blocking_from="cache model")


def tuned_kernel(row: Kernel) -> Kernel:
    """The raw row the live host runs where dispatch picked ``row``: the row of the same (op,
    dtype, algorithm) at the level a tuning file's ``kernel_level`` choice for (row.level, op,
    dtype) names (e.g. the 256-bit avx2 GEMM at avx512_core, ``kernel_from="tuning file"``),
    else ``row`` itself. The small-problem rows are not redirected (``ops/_small.py`` picks them
    per call)."""
    from . import tuning
    if row.algorithm == "small":
        return row
    kl = tuning.choices().get((row.level, row.op, row.dtype), {}).get("kernel_level")
    if kl is None or kl == row.level:
        return row
    for r in REGISTRY:
        if r.level == kl and r.op == row.op and r.dtype == row.dtype and r.algorithm == row.algorithm:
            return replace(r, kernel_from="tuning file")
    return row


def _cpu_key(cpu) -> tuple:
    return tuple(sorted((k, v) for k, v in cpu.caches.items() if isinstance(v, int)))


def with_blocking(row: Kernel, cpu=None) -> Kernel:
    """``row`` (a raw ``REGISTRY`` row) with the MC/KC/NC dispatch would run it with on ``cpu``
    (default: this host, whose tuning file counts; another ``CpuInfo`` gets shipped rows or the
    cache model)."""
    live = cpu is None or cpu is _probe()
    cpu = _probe() if cpu is None else cpu
    return _with_blocking(row, cpu.uarch, _cpu_key(cpu), live)


@lru_cache(maxsize=None)
def _with_blocking(row, uarch, caches, live):
    return _blocked(row, uarch, caches, live)


@lru_cache(maxsize=None)
def _resolve(op: str, dtype: str, level: str, uarch: str, caches: tuple, algorithm=None,
             live: bool = False) -> Kernel:
    cap_i = level_index(level)
    for row in rows(op, dtype):
        if level_index(row.level) <= cap_i and (algorithm is None or row.algorithm == algorithm):
            return _blocked(tuned_kernel(row) if live else row, uarch, caches, live)
    known = sorted({(r.op, r.dtype) for r in REGISTRY})
    raise ValueError(f"no kernel for op={op!r} dtype={dtype!r}"
                     + (f" algorithm={algorithm!r}" if algorithm else "")
                     + f"; registered (op, dtype): {known}")


_reload_hooks: list = []


def on_clear(fn) -> None:
    """Register ``fn()`` to run when the blocking in force changes (``clear_caches``): callers that
    cache rows or blocking structs (conv's plans) drop them."""
    _reload_hooks.append(fn)


def clear_caches() -> None:
    """Drop every cached selection (after the tuning file or an override changed)."""
    _resolve.cache_clear()
    _with_blocking.cache_clear()
    _live.clear()
    for fn in _reload_hooks:
        fn()


_live: dict = {}
from . import cap as _cap  # noqa: E402  (cap imports levels only; no cycle)
from .cpu import probe as _probe  # noqa: E402


def select(op: str, dtype: str, cpu=None, level: str | None = None, *,
           problem: dict | None = None) -> Kernel:
    """The registry row that would run ``op`` on ``dtype`` inputs.

    Args:
        op: "matmul", "linear" or "conv2d" (see ``rows()``).
        dtype: "float32" or "bfloat16" (or a numpy dtype / type whose name is that).
        problem: for "conv2d", the problem's ``c``, ``oc``, ``kh``, ``kw`` and ``groups``: the
            row of the algorithm that problem runs (depthwise, 1x1_gemm, grouped or
            implicit_gemm); without it, the first conv2d row (implicit_gemm).
        cpu: a ``CpuInfo`` (e.g. ``CpuInfo.from_dump(record)``) to ask about another CPU; default the
            live host, with the cap in force (``onepath.isa()``).
        level: an explicit ISA level to select at (must be one ``cpu`` can run).
    Returns:
        The ``Kernel`` row with MC/KC/NC filled in for that CPU's caches.
    Raises:
        ValueError: unknown op/dtype, or a level the CPU cannot run.
    """
    algorithm = None
    if problem is not None:
        if op != "conv2d":
            raise ValueError(f"problem= applies to op 'conv2d' only, got op={op!r}")
        algorithm = algorithm_for(**problem)
    elif cpu is None and level is None:  # the per-call path of every op: one dict lookup
        key = (op, dtype, _cap.isa())
        row = _live.get(key)
        if row is None:
            row = _live[key] = select(op, dtype, _probe(), key[2])
        return row
    from .cpu import probe
    cap = _cap
    dtype = getattr(dtype, "__name__", None) if isinstance(dtype, type) else str(getattr(dtype, "name", dtype))
    if cpu is None:
        cpu = probe()
        level = cap._check(level) if level is not None else cap.isa()
    else:
        if level is None:
            level = cpu.isa
        elif level not in cpu.levels:
            level_index(level)
            raise ValueError(f"ISA level {level!r} cannot run on that CPU; valid: {', '.join(cpu.levels)}")
    return _resolve(op, dtype, level, cpu.uarch, _cpu_key(cpu), algorithm, cpu is probe())
