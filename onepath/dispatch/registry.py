"""The registry: the single source of truth for (op, dtype, ISA level) -> kernel and its blocking.

Rows are ordered fastest first for each (op, dtype) and always end in ``generic``, as oneDNN orders
its implementation lists. ``select`` walks them and returns the first row whose level the caller may
run (host CPU and OS, lowered by the cap). Dispatch, ``python -m onepath info``, the bench and the
tests all read this table; nothing else names kernels.

Blocking (BLIS terms): MR x NR is fixed by the micro-kernel (a fact of the compiled code, checked by
the tests against what the module reports); MC, KC and NC come, strongest first, from the tuning file
``python -m onepath tune`` wrote for this host (``tuning.py``; ``ONEPATH_TUNING``), a shipped row of
``TUNING`` for the microarchitecture, or the cache model ``blocking_for``. ``Kernel.blocking_from``
says which.
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
)

_MATMUL_BF16: tuple[Kernel, ...] = (  # kernels/gemm_bf16.c, gemm_bf16_amx.c
    Kernel("matmul", "bfloat16", "avx512_core_amx", "op_gemm_bf16", "gemm_bf16_amx_32x32", 32, 32,
           elem_bytes=2, k_align=32),
    Kernel("matmul", "bfloat16", "avx512_core_bf16", "op_gemm_bf16", "gemm_bf16_avx512_bf16_14x32",
           14, 32, elem_bytes=2, k_align=32),
    Kernel("matmul", "bfloat16", "avx512_core", "op_gemm_bf16", "gemm_bf16_widen_avx512_core_14x32", 14, 32),
    Kernel("matmul", "bfloat16", "avx2", "op_gemm_bf16", "gemm_bf16_widen_avx2_6x16", 6, 16),
    Kernel("matmul", "bfloat16", "generic", "op_gemm_bf16", "gemm_bf16_widen_generic_4x8", 4, 8),
)
# onepath.linear runs the matmul kernels (B = weight^T, or a prepacked weight): same rows, op "linear".
_LINEAR: tuple[Kernel, ...] = tuple(replace(r, op="linear") for r in _MATMUL_F32 + _MATMUL_BF16)

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

REGISTRY: tuple[Kernel, ...] = _MATMUL_F32 + _MATMUL_BF16 + _LINEAR + _CONV

# Shipped tuning rows: (uarch, level, op, dtype) -> (MC, KC, NC) measured with `python -m onepath tune`
# on a host of that microarchitecture (the comment names the host and date). A "conv2d" row applies to
# the GEMM-based conv algorithms (depthwise has no cache blocking). A microarchitecture nobody
# measured has no row: the cache model covers it. Rows from a tuning file win over these.
TUNING: dict[tuple[str, str, str, str], tuple[int, int, int]] = {
    # AMD EPYC Zen 4 (family 25 model 17 stepping 1, L1d 32 KiB, L2 1 MiB, L3 32 MiB; KVM guest, 2 cores),
    # 2026-11-30: `python -m onepath tune --threads 1 --level avx512_core --level avx512_core_bf16`
    # (full search; the VM was shared, load ~9 on 2 cores, so single timings moved by +-30 %), each
    # pick then checked by paired best-of A/B runs through onepath.matmul / linear / conv2d at 1 thread
    # (square 512-2048, BERT linears, ResNet-50 3x3 and 1x1 layers). Held up: the bf16 3x3 conv's
    # larger MC/KC (+1..5 %, tune +8 %); bf16 GEMM with KC 512 beat the cache model's KC 320 at
    # 1024 (119 vs 86 GFLOP/s), so it keeps the former 168/512/2048 although its B micro-panel fills
    # L1d. Tune's other picks were within noise or slower in the A/B: those rows keep the cache
    # model's values, now measured.
    ("zen4", "avx512_core", "matmul", "float32"): (126, 160, 3072),
    ("zen4", "avx512_core", "linear", "float32"): (126, 160, 3072),
    ("zen4", "avx512_core", "conv2d", "float32"): (126, 160, 3072),
    ("zen4", "avx512_core", "matmul", "bfloat16"): (126, 160, 3072),   # widened to float32 panels
    ("zen4", "avx512_core", "linear", "bfloat16"): (126, 160, 3072),
    ("zen4", "avx512_core", "conv2d", "bfloat16"): (126, 160, 3072),
    ("zen4", "avx512_core_bf16", "matmul", "bfloat16"): (168, 512, 2048),
    ("zen4", "avx512_core_bf16", "linear", "bfloat16"): (168, 512, 2048),
    ("zen4", "avx512_core_bf16", "conv2d", "bfloat16"): (252, 480, 3072),
}


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
            return _blocked(row, uarch, caches, live)
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
        from ..ops.conv import algorithm_for
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
