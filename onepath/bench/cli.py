"""``python -m onepath bench``: header (machine + baseline), FMA peaks, suites, table, JSON."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

import onepath

from .baselines import cap_torch_isa, missing_note, onednn_check, torch_cap_lines, uncap_torch_isa
from .core import BenchConfig, Suite, discover, measure_case, peak_f32

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class BenchError(Exception):
    """A usage error (bad --isa, --threads, --suite): the CLI prints it and exits with code 2."""


# ------------------------------------------------------------------------------------------------
# Machine fingerprint and baseline


def blas_info() -> list[dict]:
    """BLAS libraries loaded in the process as threadpoolctl sees them (name, version,
    architecture/coretype, threads); ``numpy: True`` marks the one numpy links (the baseline)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"error": "threadpoolctl is not installed"}]
    keep = ("user_api", "internal_api", "prefix", "version", "architecture", "threading_layer",
            "num_threads", "filepath")
    np_dir = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))
    out = []
    for d in threadpool_info():
        if d.get("user_api") != "blas":
            continue
        row = {k: v for k, v in d.items() if k in keep}
        path = os.path.abspath(d.get("filepath") or "")
        row["numpy"] = os.path.basename(os.path.dirname(path)) in ("numpy.libs", ".dylibs") \
            or path.startswith(os.path.join(np_dir, "numpy"))
        out.append(row)
    if out and not any(r["numpy"] for r in out):
        out[0]["numpy"] = True  # a system BLAS numpy links dynamically: assume the first
    return out


# glibc malloc: mallopt(3) parameters (malloc.h) and the values the bench pins
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20   # bytes: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
_TRIM_THRESHOLD = 1 << 30    # bytes
_malloc_state: dict = {"pinned": False, "reason": "not requested"}


def steady_malloc() -> dict:
    """Pin glibc's malloc thresholds for the rest of the process (the bench CLI calls it once).

    glibc serves a block of at least the *mmap threshold* (128 KiB at start, raised at run time to
    the size of the largest mmapped block freed so far) with fresh pages from mmap, and gives freed
    heap memory back to the OS above the *trim threshold*; a call whose output lands in fresh pages
    pays one page fault and the zeroing per 4 KiB. Which side of a paired measurement (onepath, numpy
    or torch, all allocating through malloc) pays that on each call then depends on which one freed a
    large block last: measured on a Zen 4 VM, torch's NCHW ResNet-50 batch-8 1x1 conv swung between
    37 and 175 GFLOP/s and onepath's between 70 and 175 with it. Pinning the mmap threshold at 32 MiB
    (bytes) and the trim threshold at 1 GiB keeps freed blocks in the heap, for every side alike.

    Returns the state recorded in the run's fingerprint: ``{"pinned": bool, "reason": str,
    "mmap_threshold": bytes, "trim_threshold": bytes}``. Not glibc (macOS, musl, Windows), or
    ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` / a ``glibc.malloc.*`` entry of
    ``GLIBC_TUNABLES`` set by the user: left as it is (``pinned`` False, ``reason`` says why). Source of the thresholds' behaviour: the glibc
    manual, "Memory Allocation Tunables", and mallopt(3).
    """
    global _malloc_state
    user = {k: os.environ[k] for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_") if k in os.environ}
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        user["GLIBC_TUNABLES"] = os.environ["GLIBC_TUNABLES"]
    if user:
        _malloc_state = {"pinned": False, "reason": ", ".join(f"{k}={v}" for k, v in user.items())
                         + " set by the user"}
        return _malloc_state
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        _malloc_state = {"pinned": False, "reason": "not glibc"}
        return _malloc_state
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1
    _malloc_state = {"pinned": bool(ok), "reason": "mallopt" if ok else "mallopt refused",
                     "mmap_threshold": _MMAP_THRESHOLD, "trim_threshold": _TRIM_THRESHOLD}
    return _malloc_state


def fingerprint(threads: int) -> dict:
    from ..dispatch import cap_reason, probe
    cpu = probe()
    return {
        "vendor": cpu.vendor, "brand": cpu.brand, "uarch": cpu.uarch,
        "family": cpu.family, "model": cpu.model, "stepping": cpu.stepping,
        "num_cpus": cpu.num_cpus, "caches": dict(cpu.caches),
        "level": onepath.isa(), "level_reason": cap_reason(), "available_isas": list(onepath.available_isas()),
        "reproducible": onepath.is_reproducible(),
        "threads": threads, "onepath_version": getattr(onepath, "__version__", None),
        "python": sys.version.split()[0], "numpy_version": np.__version__, "blas": blas_info(),
        "env": {k: os.environ.get(k) for k in BLAS_ENV + ("ONEPATH_MAX_ISA", "ONEPATH_NUM_THREADS",
                                                           "OMP_NUM_THREADS", "ONEPATH_TUNING")},
        "tuning": _tuning_state(),
        "malloc": dict(_malloc_state),
    }


def _tuning_state() -> dict:
    from ..dispatch import tuning
    return tuning.state().as_dict()


def host_kind(fp: dict) -> str:
    """``<vendor>-<uarch>``, e.g. ``amd-zen4``; ``-<best level>`` is appended when the host cannot
    run every level its microarchitecture offers (``uarch.hidden_levels``: a VM's CPU model hiding
    AVX-512 gives ``amd-zen4-avx2``), so its runs are not shown as that microarchitecture's."""
    from ..dispatch.uarch import hidden_levels
    vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(fp.get("vendor"), fp.get("vendor") or "unknown")
    uarch = fp.get("uarch") or "unknown"
    best = (fp.get("available_isas") or [None])[-1]
    name = f"{vendor}-{uarch}" + (f"-{best}" if best and hidden_levels(uarch, best) else "")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lower()


def results_dir(fp: dict) -> Path:
    """``benchmarks/results/<host kind>/`` (``host_kind``) of the repository onepath runs from (the
    folder holding pyproject.toml above the package; else the current directory)."""
    name = host_kind(fp)
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").exists():
        root = Path.cwd()
    return root / "benchmarks" / "results" / name


def save_path(doc: dict) -> Path:
    """Where ``--save`` writes a run: ``results_dir()/<UTC date and time>-<what>-<N>t.json`` (what:
    full, quick, the suites run, or the model), e.g. ``20261130T101500Z-full-2t.json``."""
    opts = doc["options"]
    stamp = _dt.datetime.fromisoformat(doc["timestamp"]).strftime("%Y%m%dT%H%M%SZ")
    if opts.get("model"):
        what = opts["model"]
    elif opts.get("suites_requested"):
        what = "+".join(opts["suites"])
    else:
        what = "quick" if opts.get("quick") else "full"
    if opts.get("isa"):
        what += f"-{opts['isa']}"
    return results_dir(doc["fingerprint"]) / f"{stamp}-{what}-{opts['threads']}t.json"


def save(doc: dict) -> Path:
    """Write the run's JSON document (fingerprint, options, results with raw timing samples) to
    ``save_path(doc)``; returns the path."""
    path = save_path(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    return path


def header_lines(fp: dict) -> list[str]:
    def desc(b):
        return (f"{b.get('internal_api', '?')} {b.get('version') or ''} (arch {b.get('architecture') or '?'}, "
                f"{b.get('threading_layer', '?')} threading, {b.get('num_threads', '?')} threads)")
    ok = [b for b in fp["blas"] if "error" not in b]
    blas = "; ".join(desc(b) for b in ok if b.get("numpy")) or "not detected by threadpoolctl"
    others = [desc(b) for b in ok if not b.get("numpy")]
    if others:
        blas += " [also loaded: " + "; ".join(others) + "]"
    lines = [
        f"onepath {fp['onepath_version']} bench | {fp['brand'] or '?'} | {fp['vendor']} {fp['uarch']} "
        f"(family {fp['family']} model {fp['model']} stepping {fp['stepping']}), {fp['num_cpus']} cpus",
        f"level {fp['level']} ({fp['level_reason']}) | threads {fp['threads']} (onepath and BLAS)"
        + (" | reproducible mode" if fp.get("reproducible") else ""),
        f"baseline: numpy {fp['numpy_version']}, BLAS {blas}",
    ]
    set_vars = {k: fp["env"][k] for k in BLAS_ENV if fp["env"].get(k) is not None}
    if set_vars:
        lines.append("note: " + ", ".join(f"{k}={v}" for k, v in set_vars.items())
                     + " is set and may slow numpy's OpenBLAS; for a fair baseline run "
                       "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m onepath bench`")
    else:
        lines.append("OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE: not set")
    m = fp.get("malloc") or {}
    if m.get("pinned"):
        lines.append(f"malloc: mmap threshold {m['mmap_threshold'] >> 20} MiB, trim threshold "
                     f"{m['trim_threshold'] >> 20} MiB for every side (steady_malloc: no per-call page faults)")
    elif m:
        lines.append(f"malloc: not pinned ({m.get('reason')})")
    return lines


# ------------------------------------------------------------------------------------------------
# Output


def _fmt(v, spec=".1f", none="-") -> str:
    return none if v is None else format(v, spec)


def missing_baselines(rows: list[dict]) -> list[str]:
    """Baselines a suite would compare with but could not (not installed), from its rows' meta."""
    return list(dict.fromkeys(b for r in rows for b in r.get("meta", {}).get("missing_baselines", [])))


def suite_table(suite: Suite, rows: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """(title, headers, cells) of one suite's results; the title names the baselines measured."""
    baselines = list(dict.fromkeys(b for r in rows for b in r["impls"] if b != "onepath"))
    title = suite.title + (f" (onepath vs {', '.join(baselines)})" if baselines else " (no baseline)")
    if getattr(suite, "per_call", False):  # small problems: microseconds per call
        headers = ["group", "call", "kernel", "onepath us"]
        for b in baselines:
            headers += [f"{b} us", f"x {b}"]
        cells = []
        for r in rows:
            flag = "" if r["check_ok"] in (None, True) else " !"
            line = [r["group"], r["name"] + flag, r["kernel"] or "-",
                    _fmt(r["impls"]["onepath"]["seconds"] * 1e6, ".2f")]
            for b in baselines:
                imp = r["impls"].get(b)
                line += [_fmt(imp["seconds"] * 1e6, ".2f") if imp else "-", _fmt(r["ratios"].get(b), ".2f")]
            cells.append(line)
        return title, headers, cells
    mem = any(r["memory_bound"] for r in rows)
    headers = ["group", "shape", "kernel", "onepath GFLOP/s", "% peak"] + (["GB/s"] if mem else [])
    for b in baselines:
        headers += [f"{b} GFLOP/s", f"x {b}"]
    cells = []
    for r in rows:
        one = r["impls"]["onepath"]
        flag = "" if r["check_ok"] in (None, True) else " !"
        kernel = f"{r['kernel_level']} {r['kernel_mrnr']}" if r.get("kernel_mrnr") else (r["kernel"] or "-")
        line = [r["group"], r["name"] + flag, kernel, _fmt(one["gflops"]),
                _fmt(r["pct_peak"], ".0f")]
        if mem:
            line.append(_fmt(one["gbs"]) if r["memory_bound"] else "")
        for b in baselines:
            imp = r["impls"].get(b)
            line += [_fmt(imp["gflops"]) if imp else "-", _fmt(r["ratios"].get(b), ".2f")]
        cells.append(line)
    return title, headers, cells


def geomean_rows(rows: list[dict]) -> list[dict]:
    """Per group of a suite's rows: the geometric mean of each baseline ratio (x BASELINE) over the
    group's rows that measured it (the issues state their bars as such means)."""
    out = []
    for group in dict.fromkeys(r["group"] for r in rows):
        rs = [r for r in rows if r["group"] == group]
        means = {}
        for b in dict.fromkeys(b for r in rs for b in r["ratios"]):
            vals = [r["ratios"][b] for r in rs if r["ratios"].get(b)]
            if vals:
                means[b] = float(math.exp(sum(math.log(v) for v in vals) / len(vals)))
        out.append({"group": group, "rows": len(rs), "geomean": means})
    return out


def geomean_table(suite: Suite, rows: list[dict]) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, headers, cells) of the per-group geometric means (every group, one row or more), or
    None when no row has a baseline to take a ratio to."""
    gm = geomean_rows(rows)
    baselines = list(dict.fromkeys(b for g in gm for b in g["geomean"]))
    if not baselines:
        return None
    headers = ["group", "rows"] + [f"geomean x {b}" for b in baselines]
    cells = [[g["group"], str(g["rows"])] + [_fmt(g["geomean"].get(b), ".2f") for b in baselines] for g in gm]
    return f"{suite.title}: geometric mean per group", headers, cells


def _numeric(text: str) -> bool:
    t = text.strip().rstrip("!").strip()
    if t in ("", "-"):
        return True
    try:
        float(t)
    except ValueError:
        return False
    return True


def plain_table(title: str, headers: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(headers, *cells)]
    right = [bool(cells) and all(_numeric(c[i]) for c in cells) for i in range(len(headers))]

    def fmt(row):
        return "  ".join(x.rjust(w) if r else x.ljust(w) for x, w, r in zip(row, widths, right)).rstrip()
    return "\n".join([title, fmt(headers), "  ".join("-" * w for w in widths)] + [fmt(c) for c in cells])


def print_table(title: str, headers: list[str], cells: list[list[str]], file=None) -> None:
    file = file or sys.stdout
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None
    if Console is not None and file.isatty():
        from rich import box
        grouped = headers[0] == "group"  # one section row per group instead of a column
        cols = headers[1:] if grouped else headers
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for i, h in enumerate(cols):
            j = i + grouped
            numeric = bool(cells) and all(_numeric(c[j]) for c in cells)
            table.add_column(h, justify="right" if numeric else "left", no_wrap=not numeric,
                             min_width=max(len(w) for w in h.split()))
        group = None
        for c in cells:
            if grouped and c[0] != group:
                group = c[0]
                table.add_row(f"[bold]{group}[/bold]", *[""] * (len(cols) - 1))
            table.add_row(*(c[1:] if grouped else c))
        Console(file=file).print(table)
    else:
        print(plain_table(title, headers, cells), file=file)


@contextlib.contextmanager
def progress_bar(total: int, enabled: bool = True):
    """A rich progress bar on stderr (transient); yields ``(advance(), describe(text))``."""
    if not enabled:
        yield (lambda: None), (lambda text: None)
        return
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
    except ImportError:
        yield (lambda: None), (lambda text: None)
        return
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        task = prog.add_task("bench", total=total)
        yield (lambda: prog.advance(task)), (lambda text: prog.update(task, description=text))


# ------------------------------------------------------------------------------------------------
# Running


def print_suite(suite: Suite, rows: list[dict], out) -> None:
    """A suite's table, its per-group geomeans and the note on missing baselines."""
    if not rows:
        return
    print_table(*suite_table(suite, rows), file=out)
    print(file=out)
    gt = geomean_table(suite, rows)
    if gt:
        print_table(*gt, file=out)
        print(file=out)
    missing = missing_baselines(rows)
    if missing:
        print(missing_note(missing), file=out)
        print(file=out)


def make_config(quick: bool, shapes=None, repeat=None, min_time=None, threads: int = 1) -> BenchConfig:
    cfg = BenchConfig(threads=threads, quick=quick, shapes=tuple(shapes) if shapes else None)
    if quick:
        cfg.repeat, cfg.min_time = 5, 0.1
    if repeat is not None:
        cfg.repeat = repeat
    if min_time is not None:
        cfg.min_time = min_time
    return cfg


def validate_isa(level: str | None) -> str | None:
    if level is None:
        return None
    try:
        with onepath.max_isa(level) as cap:
            return cap.level
    except (ValueError, TypeError) as exc:
        raise BenchError(f"--isa {level}: {exc}") from None


@contextlib.contextmanager
def bench_environment(threads: int, isa_level: str | None):
    """Thread count for onepath and numpy's BLAS (threadpoolctl), and the ISA cap, for the block."""
    if threads < 1:
        raise BenchError(f"--threads must be a positive integer, got {threads}")
    previous = onepath.get_num_threads()
    onepath.set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(limits=threads, user_api="blas")
    except ImportError:
        limits = contextlib.nullcontext()
    try:
        with limits, (onepath.max_isa(isa_level) if isa_level else contextlib.nullcontext()):
            yield
    finally:
        onepath.set_num_threads(previous)


# A shared VM (the CI runners, the developers' hosts) may lend some of "its" cores to another guest
# for minutes at a time; a multi-threaded ratio measured then compares two sides that each got an
# unknown share of the cores. Below this share of one thread's FMA rate per thread, the bench says so.
SHARED_CORES_SHARE = 0.85


def shared_cores_notes(threads: int, peak_n: float | None, peak_1: float | None,
                       peak_end: float | None) -> list[str]:
    """Warnings that something else (another process, or another VM on the host) used part of the
    cores while the bench ran, from the FMA peaks of the best level (GFLOP/s, ``core.peak_f32``):
    ``peak_n`` at ``threads`` threads before the suites, ``peak_1`` on one thread, ``peak_end`` at
    ``threads`` threads after the suites. One line when ``peak_n`` per thread is below
    ``SHARED_CORES_SHARE`` of ``peak_1`` (part of the cores taken at the start), one when
    ``peak_end`` is below that share of ``peak_n`` (taken during the suites), and one when
    ``peak_n`` is below that share of ``peak_end`` (the cores were shared at the start and freed
    later: the "% peak" column, taken against ``peak_n``, then overstates, up to above 100%). A
    load spread evenly over every core slows ``peak_1`` as much as ``peak_n``, so the first check
    cannot see it; the others see only a change. Missing peaks (None, 0) give no line. Returns a
    list of str."""
    notes = []
    s = "s" * (threads > 1)
    if threads > 1 and peak_n and peak_1 and peak_n / threads < SHARED_CORES_SHARE * peak_1:
        notes.append(f"! shared cores: {threads} threads reach {peak_n:.1f} GFLOP/s ({peak_n / threads:.1f} "
                     f"per thread), {peak_n / threads / peak_1:.0%} of the {peak_1:.1f} one thread reaches "
                     f"alone; something else (another process or VM) is using part of the cores, so the "
                     f"{threads}-thread rows below are less reliable")
    if peak_n and peak_end and peak_end < SHARED_CORES_SHARE * peak_n:
        notes.append(f"! shared cores: the FMA peak at {threads} thread{s} fell from {peak_n:.1f} to "
                     f"{peak_end:.1f} GFLOP/s during the suites; some rows above (which ones is unknown) "
                     "are less reliable")
    if peak_n and peak_end and peak_n < SHARED_CORES_SHARE * peak_end:
        notes.append(f"! shared cores: the FMA peak at {threads} thread{s} rose from {peak_n:.1f} to "
                     f"{peak_end:.1f} GFLOP/s during the suites (the cores were shared at the start); "
                     "the % peak column, taken against the first, overstates, and rows measured "
                     "before the change are less reliable")
    return notes


def cap_torch_for_run() -> dict | None:
    """Where onepath runs below the best level the host can run (``--isa``, ``ONEPATH_MAX_ISA``),
    cap torch at the level in force (``baselines.cap_torch_isa``) and probe what its bf16 matmul
    then runs (``baselines.onednn_check``, under "check"). None when onepath is not capped."""
    level = onepath.isa()
    if level == onepath.available_isas()[-1]:
        return None
    import importlib.util
    cap = cap_torch_isa(level)
    cap["torch_present"] = importlib.util.find_spec("torch") is not None   # (on this host)
    cap["check"] = onednn_check()
    return cap


def torch_cap_header(cap: dict | None) -> list[str]:
    """The header lines on torch's caps for ``cap_torch_for_run``'s result (none when not capped)."""
    if cap is None:
        return []
    return torch_cap_lines(cap, cap.get("check"), cap.get("torch_present", True))


def _peak(level: str, threads: int, quick: bool) -> tuple[float | None, str | None]:
    """``core.peak_f32`` as the bench's peak table measures it: (GFLOP/s, None), or (None, the
    error) where the level's FMA loop cannot run."""
    try:
        return peak_f32(level, threads, seconds=0.05 if quick else 0.2, repeat=2 if quick else 3), None
    except (ImportError, ValueError, AttributeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _peak_or_none(level: str, threads: int, quick: bool) -> float | None:
    """``_peak``'s GFLOP/s, None where it cannot run (the shared-cores checks)."""
    return _peak(level, threads, quick)[0]


def peak_levels() -> list[str]:
    """Levels the host can run, up to the level in force."""
    avail = list(onepath.available_isas())
    return avail[: avail.index(onepath.isa()) + 1]


def run(*, threads: int, isa_level: str | None = None, quick: bool = False, suites=None,
        shapes=None, repeat=None, min_time=None, json_path: str | None = None, peak: bool = True,
        progress: bool = True, out=None, save_results: bool = False) -> dict:
    """Run the bench and print it; returns the JSON document (also written to ``json_path``, and
    with ``save_results`` to ``benchmarks/results/<vendor>-<uarch>/``, see ``save_path``)."""
    out = out or sys.stdout
    all_suites = discover()
    if suites:
        unknown = [s for s in suites if s not in all_suites]
        if unknown:
            raise BenchError(f"unknown suite(s) {', '.join(unknown)}; available: {', '.join(all_suites)}")
        chosen = [all_suites[s] for s in suites]
    else:
        chosen = [s for s in all_suites.values() if s.default]
    isa_level = validate_isa(isa_level)
    cfg = make_config(quick, shapes, repeat, min_time, threads)
    torch_cap = None
    with contextlib.ExitStack() as undo, bench_environment(threads, isa_level):
        fp = fingerprint(threads)
        for line in header_lines(fp):
            print(line, file=out)
        torch_cap = cap_torch_for_run()   # before any suite imports torch
        undo.callback(uncap_torch_isa, torch_cap)
        for line in torch_cap_header(torch_cap):
            print(line, file=out)
        print(file=out)
        out.flush()
        levels = peak_levels() if peak else []
        cases = [(s, c) for s in chosen for c in s.factory(cfg)]
        missing = list(dict.fromkeys(b for _, c in cases for b in c.meta.get("missing_baselines", [])))
        if missing:  # said before the run, and again under each suite that lacks it
            print(missing_note(missing) + "\n", file=out)
        torch = sys.modules.get("torch")  # a suite with a torch baseline imported it: same threads
        torch_threads = torch.get_num_threads() if torch is not None else None
        if torch is not None:
            torch.set_num_threads(threads)
        total = len(levels) + sum(cfg.repeat * (1 + len(c.baselines)) for _, c in cases)
        peaks: dict[str, float] = {}
        peak_errors: dict[str, str] = {}
        peak_1 = peak_end = check_level = None   # the shared-cores checks (shared_cores_notes)
        check_notes: list[str] = []
        results: list[dict] = []
        stdout = sys.stdout
        with progress_bar(total, progress and sys.stderr.isatty()) as (advance, describe):
            # each table is printed as soon as its rows are measured; through sys.stdout (which a
            # live progress bar redirects above itself) when printing to the terminal's stdout
            live_out = sys.stdout if out is stdout else out
            for level in levels:
                describe(f"FMA peak {level}")
                gflops, err = _peak(level, threads, quick)
                if err is None:
                    peaks[level] = gflops
                else:
                    peak_errors[level] = err
                advance()
            check_level = next((lv for lv in reversed(levels) if lv in peaks), None)
            if threads > 1 and check_level:  # the share of the cores this process gets
                peak_1 = _peak_or_none(check_level, 1, quick)
                if shared_cores_notes(threads, peaks[check_level], peak_1, None):
                    # once more before warning: the first measurement of a process may run cold
                    again = _peak_or_none(check_level, threads, quick)
                    peaks[check_level] = max(peaks[check_level], again or 0.0)
                check_notes += shared_cores_notes(threads, peaks[check_level], peak_1, None)
            if levels:
                pk = [[lv, f"{peaks[lv]:.1f}", f"{peaks[lv] / threads:.1f}"] if lv in peaks
                      else [lv, "-", "-"] for lv in levels]
                print_table(f"FMA peak (float32, {threads} thread{'s' * (threads > 1)})",
                            ["level", "GFLOP/s", "per thread"], pk, file=live_out)
                for lv, err in peak_errors.items():
                    print(f"  {lv}: not measured ({err})", file=live_out)
                for line in check_notes:
                    print(line, file=live_out)
                print(file=live_out)
            while cases:
                suite, case = cases.pop(0)  # drop each case's arrays once it is measured
                describe(f"{suite.name} {case.group} {case.name}".strip())
                row = measure_case(case, cfg, peaks, tick=advance)
                row["suite"] = suite.name
                results.append(row)
                if not cases or cases[0][0] is not suite:
                    print_suite(suite, [r for r in results if r["suite"] == suite.name], live_out)
                    live_out.flush()
        if torch is not None:
            torch.set_num_threads(torch_threads)
        if check_level and results:  # did the cores stay this process's?
            peak_end = _peak_or_none(check_level, threads, quick)
            end_notes = shared_cores_notes(threads, peaks[check_level], None, peak_end)
            for line in end_notes:
                print(line, file=out)
            check_notes += end_notes
        bad = [r for r in results if r["check_ok"] is False]
        if bad:
            print("! onepath's result differs from the baseline beyond tolerance: "
                  + ", ".join(f"{r['suite']}/{r['name']} (rel err {r['max_rel_err']:.2e})" for r in bad),
                  file=out)
        print("x BASELINE = BASELINE time / onepath time (> 1: onepath is faster); "
              "% peak = onepath GFLOP/s / FMA peak of the kernel's level.", file=out)
    doc = {
        "schema": 1,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "fingerprint": fp,
        "options": {"threads": threads, "isa": isa_level, "quick": quick,
                    "suites": [s.name for s in chosen], "suites_requested": bool(suites),
                    "repeat": cfg.repeat,
                    "min_time": cfg.min_time, "shapes": list(cfg.shapes) if cfg.shapes else None},
        "peak": [{"level": lv, "threads": threads, "gflops": peaks.get(lv),
                  **({"error": peak_errors[lv]} if lv in peak_errors else {})} for lv in levels],
        "peak_checks": {"level": check_level, "one_thread_gflops": peak_1, "end_gflops": peak_end,
                        "notes": check_notes},
        "torch_cap": torch_cap,
        "results": results,
        "geomeans": {suite.name: geomean_rows([r for r in results if r["suite"] == suite.name])
                     for suite in chosen},
        "missing_baselines": {suite.name: m for suite in chosen
                              if (m := missing_baselines([r for r in results if r["suite"] == suite.name]))},
        "ok": not bad,
    }
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, default=str)
            f.write("\n")
        print(f"wrote {json_path}", file=sys.stderr)
    if save_results:
        print(f"saved {save(doc)}", file=sys.stderr)
    return doc
