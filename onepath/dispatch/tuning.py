"""The per-host tuning file: cache blocking and kernel choices measured by ``python -m onepath tune``
on this CPU.

Where dispatch gets each row's MC/KC/NC from, weakest first:

1. the cache model (``registry.blocking_for``, from the probed cache sizes);
2. a shipped row in ``registry.TUNING`` for the host's microarchitecture;
3. the tuning file ``$XDG_CACHE_HOME/onepath/tuning-<uarch>-<hash>.json`` (default
   ``~/.cache/onepath``), written by ``python -m onepath tune`` on this host;
4. the file ``ONEPATH_TUNING=PATH`` names (it replaces the default file; ``ONEPATH_TUNING=off``
   ignores every tuning file).

The file is read once, at the first dispatch, and applies only to the CPU it was measured on: it
names the vendor, uarch, family/model/stepping, caches and onepath version, and a file whose
fingerprint differs (another CPU, another onepath version), that is not valid JSON, that has keys
this version does not know, or whose values are out of range is ignored with one
``TuningWarning``: dispatch then uses the shipped rows. A blocking only changes speed, never the
result (the kernels handle every MC/KC/NC >= 1; the tests run them with odd values at every level).

Besides the blocking ``rows``, schema 2 has ``choices``, one per (level, op, dtype), each naming any of:

* ``conv_as_nhwc`` (conv2d only): which NCHW convolutions on that level's conv rows run in the NHWC
  formulation, as ``registry.CONV_NCHW_AS_NHWC`` gives them per microarchitecture: the largest
  output plane (OH*OW pixels) per problem class "kxk", "kxk_stride1", "1x1_batch", "1x1_stride", "1x1_single" (0: never); the
  classes the choice names replace the shipped ones, the others stay;
* ``kernel_level``: a lower ISA level whose kernel of the same (op, dtype, algorithm) runs where
  dispatch would run this level's (e.g. the 256-bit ``avx2`` GEMM at ``avx512_core``);
* ``thin_f32`` (matmul float32 only): the options of that level's thin float32 products (M <= 16,
  ``x @ W`` and ``x @ W.T``), a list of ``registry.GEMV_F32_FLAGS`` names (empty: none), in place of
  the shipped ``registry.GEMV_F32_OPTIONS`` row.

Every value a choice can take computes the same result within each formulation's rounding (the
tests run each one). A schema-1 file (blocking rows only) is read as it is.

File format (JSON)::

    {"format": "onepath-tuning", "schema": 2, "onepath_version": "0.1.0",
     "cpu": {"vendor": "AuthenticAMD", "uarch": "zen4", "family": 25, "model": 17, "stepping": 1,
             "caches": {"l1d": 32768, "l2": 1048576, "l3": 33554432}},
     "created": "2026-11-30T10:00:00+00:00", "threads": 2, "quick": false,
     "rows": [{"op": "matmul", "dtype": "float32", "level": "avx512_core",
               "mc": 126, "kc": 256, "nc": 3072, "gflops": 101.3, "model_gflops": 97.0}],
     "choices": [{"op": "conv2d", "dtype": "float32", "level": "avx512_core",
                  "conv_as_nhwc": {"kxk": 196, "1x1_batch": 49, "1x1_stride": 784}},
                 {"op": "linear", "dtype": "float32", "level": "avx512_core", "kernel_level": "avx512_core"},
                 {"op": "matmul", "dtype": "float32", "level": "avx512_core", "thin_f32": ["ksplit"]}]}
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import warnings
from pathlib import Path

FORMAT = "onepath-tuning"
SCHEMA = 2
READS = (1, 2)         # schemas this version reads (1: blocking rows only, no "choices")
ENV = "ONEPATH_TUNING"
OFF_VALUES = ("off", "0", "none", "false", "no")

# Accepted keys (anything else: the file comes from another version and is ignored).
_TOP_REQUIRED = {"format", "schema", "onepath_version", "cpu", "rows"}
_TOP_OPTIONAL = {"created", "threads", "quick", "command", "choices"}
_CPU_KEYS = {"vendor", "uarch", "family", "model", "stepping", "caches"}
_CACHE_KEYS = ("l1d", "l2", "l3")
_ROW_REQUIRED = {"op", "dtype", "level", "mc", "kc", "nc"}
_ROW_OPTIONAL = {"gflops", "model_gflops", "pct_peak", "problem"}
_CHOICE_REQUIRED = {"op", "dtype", "level"}
_CHOICE_KINDS = {"conv_as_nhwc", "kernel_level", "thin_f32"}
_CHOICE_OPTIONAL = _CHOICE_KINDS | {"detail"}     # detail: what tune measured (not read)
CONV_CLASSES = ("kxk", "kxk_stride1", "1x1_batch", "1x1_stride", "1x1_single")  # registry.CONV_NCHW_AS_NHWC's problem classes
CONV_PIXELS_MAX = 1 << 24
# Upper bounds: a blocking beyond them is no tuning result (and would allocate huge packing buffers).
LIMITS = {"mc": 4096, "kc": 4096, "nc": 16384}


class TuningWarning(UserWarning):
    """A tuning file was ignored (corrupt, another CPU, another onepath version, unknown keys)."""


class TuningError(ValueError):
    """Why a tuning document cannot be used (the message names the file and the reason)."""


def _version() -> str:
    from .. import __version__
    return __version__


def fingerprint(cpu) -> dict:
    """The CPU part of the key: vendor, uarch, family/model/stepping and the L1d/L2/L3 sizes (bytes)."""
    return {"vendor": cpu.vendor, "uarch": cpu.uarch, "family": int(cpu.family),
            "model": int(cpu.model), "stepping": int(cpu.stepping),
            "caches": {k: int(cpu.caches.get(k) or 0) for k in _CACHE_KEYS}}


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/onepath`` (XDG base directory spec), default ``~/.cache/onepath``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not base or not os.path.isabs(base):  # the spec says: relative paths are invalid, ignore them
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onepath"


def default_path(cpu=None) -> Path:
    """The default tuning file of ``cpu`` (default: this host): one file per CPU fingerprint and
    onepath version, so a home directory shared by several machines keeps one file each."""
    if cpu is None:
        from .cpu import probe
        cpu = probe()
    key = json.dumps([fingerprint(cpu), _version()], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / f"tuning-{cpu.uarch}-{digest}.json"


def env_setting() -> tuple[str, Path | None]:
    """How ``ONEPATH_TUNING`` asks for the file: ("off", None), ("explicit", path) or ("default", None)."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF_VALUES:
        return "off", None
    if value:
        return "explicit", Path(os.path.expanduser(value))
    return "default", None


def _int(v, what: str) -> int:
    if type(v) is not int:  # bool is not an int here, nor is 3.0
        raise TuningError(f"{what} must be an integer, got {v!r}")
    return v


def _check_keys(obj: dict, required: set, optional: set, where: str, hint: str = "") -> None:
    """TuningError naming the keys of ``obj`` outside ``required | optional``, or those missing."""
    unknown = set(obj) - required - optional
    if unknown:
        raise TuningError(f"{where}unknown keys {sorted(unknown)}{hint}")
    missing = required - set(obj)
    if missing:
        raise TuningError(f"{where}missing keys {sorted(missing)}")


def parse(doc, cpu, version: str | None = None) -> dict[tuple[str, str, str], tuple[int, int, int]]:
    """Validate a tuning document for ``cpu`` and return its blocking rows:
    ``{(level, op, dtype): (mc, kc, nc)}`` (``parse_all`` also returns the choices).

    Raises:
        TuningError: not a tuning document, an unknown key, another CPU (vendor, uarch,
            family/model/stepping or cache sizes differ), another onepath version or schema,
            a row naming no registry kernel, or a blocking outside 1..LIMITS; a choice that is
            invalid (see ``parse_all``).
    """
    return parse_all(doc, cpu, version)[0]


def parse_all(doc, cpu, version: str | None = None) -> tuple[dict, dict]:
    """Validate a tuning document for ``cpu``: ``(rows, choices)`` with rows as ``parse`` returns
    them and choices ``{(level, op, dtype): {"conv_as_nhwc": {class: pixels}, "kernel_level": str}}``
    (each with the keys its entry names). A schema-1 document has no choices.

    Raises:
        TuningError: as ``parse``; also a choice for no registry kernel, a second choice for one
            (level, op, dtype), ``conv_as_nhwc`` on another op than conv2d or with an unknown
            class or a pixel count outside 0..CONV_PIXELS_MAX, a ``kernel_level`` that is no ISA
            level, is above the row's level or has no kernel of the same (op, dtype) algorithms.
    """
    from .levels import LEVELS, level_index
    from .registry import REGISTRY
    version = _version() if version is None else version
    if not isinstance(doc, dict):
        raise TuningError(f"not a JSON object (got {type(doc).__name__})")
    if doc.get("format") != FORMAT:
        raise TuningError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
    _check_keys(doc, _TOP_REQUIRED, _TOP_OPTIONAL, "", " (written by another onepath version?)")
    if doc["schema"] not in READS or type(doc["schema"]) is not int:
        raise TuningError(f"schema {doc['schema']!r}, this onepath reads schemas {list(READS)}")
    if doc["schema"] == 1 and "choices" in doc:
        raise TuningError("unknown keys ['choices'] in a schema-1 file")
    if doc["onepath_version"] != version:
        raise TuningError(f"written by onepath {doc['onepath_version']!r}, this is {version!r}: "
                          f"re-run `python -m onepath tune`")
    fcpu = doc["cpu"]
    if not isinstance(fcpu, dict) or set(fcpu) != _CPU_KEYS or not isinstance(fcpu.get("caches"), dict) \
            or set(fcpu["caches"]) != set(_CACHE_KEYS):
        raise TuningError(f"cpu must have exactly the keys {sorted(_CPU_KEYS)} "
                          f"(caches: {list(_CACHE_KEYS)}), got {fcpu!r}")
    here = fingerprint(cpu)
    if fcpu != here:
        diff = {k: (fcpu.get(k), here[k]) for k in here if fcpu.get(k) != here[k]}
        raise TuningError(f"measured on another CPU (file vs this host: {diff})")
    if not isinstance(doc["rows"], list):
        raise TuningError("rows must be a list")
    known = {(r.level, r.op, r.dtype) for r in REGISTRY}
    out: dict[tuple[str, str, str], tuple[int, int, int]] = {}
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict):
            raise TuningError(f"rows[{i}] is not an object")
        _check_keys(row, _ROW_REQUIRED, _ROW_OPTIONAL, f"rows[{i}]: ")
        key = (row["level"], row["op"], row["dtype"])
        if not all(isinstance(v, str) for v in key) or key not in known:
            raise TuningError(f"rows[{i}]: no registry kernel for level={key[0]!r} op={key[1]!r} "
                              f"dtype={key[2]!r}")
        blk = []
        for name in ("mc", "kc", "nc"):
            v = _int(row[name], f"rows[{i}].{name}")
            if not 1 <= v <= LIMITS[name]:
                raise TuningError(f"rows[{i}].{name} = {v} is outside 1..{LIMITS[name]}")
            blk.append(v)
        if key in out:
            raise TuningError(f"rows[{i}]: a second row for {key}")
        out[key] = tuple(blk)
    choices: dict[tuple[str, str, str], dict] = {}
    raw = doc.get("choices", [])
    if not isinstance(raw, list):
        raise TuningError("choices must be a list")
    for i, ch in enumerate(raw):
        where = f"choices[{i}]"
        if not isinstance(ch, dict):
            raise TuningError(f"{where} is not an object")
        _check_keys(ch, _CHOICE_REQUIRED, _CHOICE_OPTIONAL, f"{where}: ")
        if not _CHOICE_KINDS & set(ch):
            raise TuningError(f"{where}: names none of {sorted(_CHOICE_KINDS)}")
        key = (ch["level"], ch["op"], ch["dtype"])
        if not all(isinstance(v, str) for v in key) or key not in known:
            raise TuningError(f"{where}: no registry kernel for level={key[0]!r} op={key[1]!r} "
                              f"dtype={key[2]!r}")
        if key in choices:
            raise TuningError(f"{where}: a second choice for {key}")
        got: dict = {}
        if "conv_as_nhwc" in ch:
            lim = ch["conv_as_nhwc"]
            if key[1] != "conv2d":
                raise TuningError(f"{where}: conv_as_nhwc applies to op 'conv2d', not {key[1]!r}")
            if not isinstance(lim, dict) or not lim or set(lim) - set(CONV_CLASSES):
                raise TuningError(f"{where}.conv_as_nhwc must map some of {list(CONV_CLASSES)} to "
                                  f"pixel counts, got {lim!r}")
            for cls, v in lim.items():
                if not 0 <= _int(v, f"{where}.conv_as_nhwc.{cls}") <= CONV_PIXELS_MAX:
                    raise TuningError(f"{where}.conv_as_nhwc.{cls} = {v} is outside 0..{CONV_PIXELS_MAX}")
            got["conv_as_nhwc"] = dict(lim)
        if "kernel_level" in ch:
            kl = ch["kernel_level"]
            if not isinstance(kl, str) or kl not in LEVELS:
                raise TuningError(f"{where}.kernel_level {kl!r} is no ISA level; valid: {', '.join(LEVELS)}")
            if level_index(kl) > level_index(key[0]):
                raise TuningError(f"{where}.kernel_level {kl!r} is above the row's level {key[0]!r}")
            algos = {r.algorithm for r in REGISTRY if (r.level, r.op, r.dtype) == key}
            have = {r.algorithm for r in REGISTRY if (r.level, r.op, r.dtype) == (kl,) + key[1:]}
            if not algos <= have:
                raise TuningError(f"{where}.kernel_level {kl!r}: no {key[1]} {key[2]} kernel there for "
                                  f"{sorted(algos - have)}")
            got["kernel_level"] = kl
        if "thin_f32" in ch:
            from .registry import GEMV_F32_FLAGS
            opts = ch["thin_f32"]
            if key[1:] != ("matmul", "float32"):
                raise TuningError(f"{where}: thin_f32 applies to op 'matmul' dtype 'float32', not "
                                  f"{key[1]!r} {key[2]!r}")
            if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts) \
                    or set(opts) - set(GEMV_F32_FLAGS) or len(set(opts)) != len(opts):
                raise TuningError(f"{where}.thin_f32 must list distinct options of "
                                  f"{sorted(GEMV_F32_FLAGS)}, got {opts!r}")
            got["thin_f32"] = tuple(opts)
        choices[key] = got
    return out, choices


def read(path, cpu) -> dict[tuple[str, str, str], tuple[int, int, int]]:
    """Read and ``parse`` the tuning file ``path`` (its blocking rows). Raises ``TuningError``
    (also for I/O and JSON errors, with the path in the message)."""
    return read_all(path, cpu)[0]


def _unique_keys(pairs: list) -> dict:
    """``json`` object hook: a key given twice is an error (json keeps the last one silently, so a
    hand-edited file would run a row other than the one its reader sees first)."""
    doc = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"duplicate key {key!r}")
        doc[key] = value
    return doc


def read_all(path, cpu) -> tuple[dict, dict]:
    """Read and ``parse_all`` the tuning file ``path``: (rows, choices). Raises as ``read``."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f, object_pairs_hook=_unique_keys)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        # ValueError: not JSON (JSONDecodeError), a duplicate key or an integer of over 4300 digits
        raise TuningError(f"{path}: cannot read it: {type(exc).__name__}: {exc}") from None
    try:
        return parse_all(doc, cpu)
    except TuningError as exc:
        raise TuningError(f"{path}: {exc}") from None


def document(cpu, rows: list[dict], *, threads: int | None = None, quick: bool | None = None,
             created: str | None = None, choices: list[dict] | None = None) -> dict:
    """A tuning document for ``cpu`` with ``rows`` (dicts with op, dtype, level, mc, kc, nc and
    optionally gflops, model_gflops, pct_peak, problem) and ``choices`` (dicts with op, dtype,
    level and conv_as_nhwc and/or kernel_level, optionally detail)."""
    import datetime as _dt
    doc = {"format": FORMAT, "schema": SCHEMA, "onepath_version": _version(), "cpu": fingerprint(cpu),
           "created": created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "rows": rows}
    if threads is not None:
        doc["threads"] = threads
    if quick is not None:
        doc["quick"] = quick
    if choices:
        doc["choices"] = choices
    return doc


def write(path, doc: dict) -> Path:
    """Write ``doc`` to ``path`` atomically (a temporary file renamed over it); creates the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------------------
# The state dispatch reads (loaded once)


class State:
    """What dispatch uses: ``rows`` {(level, op, dtype): (mc, kc, nc)}, ``choices``
    {(level, op, dtype): {"conv_as_nhwc": ..., "kernel_level": ...}}, the file ``path`` they came
    from (None: none), ``mode`` ("default", "explicit", "off", "override") and ``status``
    (a sentence for ``info``: loaded, not found, ignored and why)."""
    __slots__ = ("rows", "choices", "path", "mode", "status")

    def __init__(self, rows, path, mode, status, choices=None):
        self.rows, self.path, self.mode, self.status = rows, path, mode, status
        self.choices = choices or {}

    def as_dict(self) -> dict:
        return {"mode": self.mode, "path": None if self.path is None else str(self.path),
                "status": self.status, "rows": len(self.rows), "choices": len(self.choices)}


def _caller_stacklevel() -> int:
    """``warnings.warn`` stacklevel of the first frame outside the onepath package, for the caller.

    The tuning file is read lazily, at a depth that depends on which call got there first, so a fixed
    stacklevel would name a line inside onepath; this one names the user's call.
    """
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(2), 2  # level 1 is the caller (the function that warns)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


_lock = threading.Lock()
_state: State | None = None
_override: State | None = None


def _load() -> State:
    from .cpu import probe
    mode, path = env_setting()
    if mode == "off":
        return State({}, None, mode, f"{ENV}=off: tuning files ignored")
    cpu = probe()
    if mode == "default":
        path = default_path(cpu)
        if not path.exists():
            return State({}, path, mode, "no tuning file for this host (python -m onepath tune writes one)")
    try:
        rows, choices = read_all(path, cpu)
    except TuningError as exc:
        msg = f"onepath: tuning file ignored, using the shipped blocking and choices: {exc}"
        warnings.warn(msg, TuningWarning, stacklevel=_caller_stacklevel())
        return State({}, path, mode, f"ignored: {exc}")
    return State(rows, path, mode, f"loaded {len(rows)} rows"
                 + (f" and {len(choices)} choices" if choices else ""), choices)


def state() -> State:
    """The tuning state in force (the file is read at the first call; a scoped ``override`` wins)."""
    global _state
    if _override is not None:
        return _override
    if _state is None:
        with _lock:
            if _state is None:
                _state = _load()
    return _state


def rows() -> dict[tuple[str, str, str], tuple[int, int, int]]:
    """{(level, op, dtype): (mc, kc, nc)} of the tuning file in force (empty without one)."""
    return state().rows


def choices() -> dict[tuple[str, str, str], dict]:
    """{(level, op, dtype): {"conv_as_nhwc": {class: pixels}, "kernel_level": level}} of the tuning
    file in force (empty without one)."""
    return state().choices


def reload() -> State:
    """Forget the loaded file and every dispatch cache built from it; the next dispatch re-reads
    ``ONEPATH_TUNING`` and the file. Returns the new state."""
    global _state
    with _lock:
        _state = None
    from . import registry
    registry.clear_caches()
    return state()


@contextlib.contextmanager
def override(rows: dict, choices: dict | None = None):
    """Process-wide, for tests and ``tune``: dispatch uses ``rows`` ({(level, op, dtype): (mc, kc,
    nc)}) and ``choices`` (as ``choices()`` returns them; not validated) as if a tuning file gave
    them, inside the block. Not thread-safe: nest or run it only where no other thread dispatches."""
    global _override
    from . import registry
    previous = _override
    _override = State(dict(rows), None, "override", f"override of {len(rows)} rows", dict(choices or {}))
    registry.clear_caches()
    try:
        yield _override
    finally:
        _override = previous
        registry.clear_caches()
