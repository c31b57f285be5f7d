"""The ISA cap: which level is in force, and how a user lowers it.

Sources, strongest first: a scoped ``with onepath.max_isa(level):`` block (per thread / asyncio task,
held in a ContextVar), the process-wide cap set by a bare ``onepath.max_isa(level)`` call, the
``ONEPATH_MAX_ISA`` environment variable (read once, at first use), and finally the best level the
probe found. Like oneDNN's ``ONEDNN_MAX_CPU_ISA`` but changeable at run time.
"""
from __future__ import annotations

import contextvars
import os
import threading

from .levels import LEVELS, level_index

_lock = threading.Lock()
_global_cap: str | None = None
_env_read = False
_scoped: contextvars.ContextVar[str | None] = contextvars.ContextVar("onepath_max_isa", default=None)


def _host():
    from .cpu import probe
    return probe()


def available_isas() -> tuple[str, ...]:
    """Every ISA level this host's CPU and OS can run, ascending, e.g. ``("generic", "avx2")``."""
    return tuple(_host().levels)


def _check(level: str) -> str:
    """Validate a level name against the host; raise ValueError naming the valid levels."""
    if not isinstance(level, str):
        raise TypeError(f"ISA level must be a str, got {type(level).__name__}")
    name = level.strip().lower()
    level_index(name)  # unknown name -> ValueError listing LEVELS
    avail = available_isas()
    if name not in avail:
        raise ValueError(
            f"ISA level {name!r} cannot run on this host (best: {avail[-1]!r}); "
            f"valid levels here: {', '.join(avail)}")
    return name


def _env_cap() -> str | None:
    global _env_read, _global_cap
    if not _env_read:
        with _lock:
            if not _env_read:
                value = os.environ.get("ONEPATH_MAX_ISA", "").strip()
                _env_read = True
                if value:
                    try:
                        _global_cap = _check(value)
                    except ValueError as exc:
                        raise ValueError(f"ONEPATH_MAX_ISA={value!r}: {exc}") from None
    return _global_cap


def cap() -> str | None:
    """The cap in force for the calling thread/context, or None when nothing caps the level."""
    scoped = _scoped.get()
    return scoped if scoped is not None else _env_cap()


def isa() -> str:
    """Name of the ISA level in force: the host's best level, lowered by the cap if one is set."""
    c = cap()
    return c if c is not None else available_isas()[-1]


def cap_reason() -> str:
    """Why the level in force is what it is (for ``python -m onepath info``)."""
    scoped, glob = _scoped.get(), _env_cap()
    if scoped is not None:
        return f"capped by a `with onepath.max_isa({scoped!r})` block"
    if glob is not None:
        src = "ONEPATH_MAX_ISA" if os.environ.get("ONEPATH_MAX_ISA") == glob else "onepath.max_isa()"
        return f"capped at {glob!r} by {src}"
    return "best level the CPU and OS allow"


class max_isa:
    """Cap the ISA level onepath may use.

    ``onepath.max_isa("avx2")`` caps the whole process from now on; ``onepath.max_isa(None)`` lifts
    the process-wide cap. ``with onepath.max_isa("avx2"): ...`` caps only the calling thread (or
    asyncio task) for the block and restores the previous state on exit, so other threads keep
    their level: the object undoes its process-wide effect as the block is entered.

    Args:
        level: one of ``available_isas()`` (case-insensitive), or None.
    Raises:
        ValueError: unknown level name, or a level this host cannot run (the message lists the
            valid levels).
        TypeError: level is not a str or None.
    """

    def __init__(self, level: str | None):
        global _global_cap
        _env_cap()
        self.level = None if level is None else _check(level)
        with _lock:
            self._previous = _global_cap
            _global_cap = self.level
        self._token = None

    def __enter__(self):
        global _global_cap
        with _lock:  # a scoped cap: undo the process-wide effect of the constructor
            if _global_cap == self.level:
                _global_cap = self._previous
        self._token = _scoped.set(self.level if self.level is not None else available_isas()[-1])
        return self

    def __exit__(self, *exc):
        _scoped.reset(self._token)
        return False

    def __repr__(self):
        return f"onepath.max_isa({self.level!r})"
