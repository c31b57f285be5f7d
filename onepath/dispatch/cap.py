"""The ISA cap: which level is in force, and how a user lowers it.

Sources, strongest first: a scoped ``with onepath.max_isa(level):`` block (per thread / asyncio task,
held in a ContextVar), the process-wide cap set by a bare ``onepath.max_isa(level)`` call, the
``ONEPATH_MAX_ISA`` environment variable (read once, at first use), and finally the best level the
probe found. Like oneDNN's ``ONEDNN_MAX_CPU_ISA`` but changeable at run time.
"""
from __future__ import annotations

import contextvars
import dis
import os
import sys
import threading
import weakref

from .levels import LEVELS, level_index

_lock = threading.Lock()
_env_cap: str | None = None
_env_read = False
# Process-wide caps from max_isa() calls not (yet) used as a `with` block: [(weakref to the
# object, level)], oldest first. The newest entry is the process cap; an object entering a `with`
# block removes its own entry, so a `with max_isa(...)` never leaves a process-wide trace.
_pending: list[tuple[weakref.ref, str | None]] = []
_scoped: contextvars.ContextVar[str | None] = contextvars.ContextVar("onepath_max_isa", default=None)
# the (max_isa object, token of _scoped) of every block the context is inside, innermost last: one
# object may be entered by several threads or asyncio tasks at once, or again inside its own block
_blocks: contextvars.ContextVar[tuple] = contextvars.ContextVar("onepath_max_isa_blocks",
                                                                default=())


def _host():
    from .cpu import probe
    return probe()


_host_levels: tuple[str, ...] | None = None


def available_isas() -> tuple[str, ...]:
    """Every ISA level this host's CPU and OS can run, ascending, e.g. ``("generic", "avx2")``.
    The cap does not change this list (it is what the host can run)."""
    global _host_levels
    if _host_levels is None:
        _host_levels = tuple(_host().levels)
    return _host_levels


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


def _read_env() -> str | None:
    global _env_read, _env_cap
    if not _env_read:
        with _lock:
            if not _env_read:
                value = os.environ.get("ONEPATH_MAX_ISA", "").strip()
                if value:
                    try:
                        _env_cap = _check(value)
                    except ValueError as exc:
                        raise ValueError(f"ONEPATH_MAX_ISA={value!r}: {exc}") from None
                _env_read = True
    return _env_cap


def _process_cap() -> str | None:
    """The newest bare max_isa() call's level, else ONEPATH_MAX_ISA, else None."""
    env = _read_env()
    pending = _pending
    return pending[-1][1] if pending else env


def _min_level(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if level_index(a) <= level_index(b) else b


def cap() -> str | None:
    """The cap in force for the calling thread/context, or None when nothing caps the level.
    A scoped cap lowers the process cap; it never raises it."""
    return _min_level(_scoped.get(), _process_cap())


# isa() outside any `with` block, kept until a max_isa() call changes the process cap (every op
# asks for it on every call; this keeps that to a ContextVar read and a global read)
_process_isa: str | None = None
# functions called whenever the process cap may have changed (caches keyed by the scoped cap)
on_change: list = []


def isa() -> str:
    """Name of the ISA level in force: the host's best level, lowered by the cap if one is set."""
    global _process_isa
    if _scoped.get() is None:
        level = _process_isa
        if level is None:
            env, best = _read_env(), available_isas()[-1]
            with _lock:  # max_isa() resets the cache under the same lock
                level = _pending[-1][1] if _pending else env
                level = _process_isa = level if level is not None else best
        return level
    c = cap()
    return c if c is not None else available_isas()[-1]


def cap_reason() -> str:
    """Why the level in force is what it is (for ``python -m onepath info``)."""
    scoped, process = _scoped.get(), _process_cap()
    if scoped is not None and cap() == scoped:
        return f"capped by a `with onepath.max_isa({scoped!r})` block"
    if process is not None:
        src = "onepath.max_isa()" if _pending else "ONEPATH_MAX_ISA"
        return f"capped at {process!r} by {src}"
    return "best level the CPU and OS allow"


def _prune() -> None:
    """Drop entries that can no longer matter: an entry whose object is gone can never be removed
    by a `with`, so every entry before it is shadowed for good."""
    for i in range(len(_pending) - 1, -1, -1):
        if _pending[i][0]() is None:
            del _pending[:i]
            break


# (code object, offset of the call) -> whether the call's value goes straight into a `with`
_with_sites: dict = {}


def _called_as_with(frame) -> bool:
    """Whether the call being made at ``frame``'s current instruction is a `with` statement's
    context expression (``with max_isa(L):``). Read from the caller's bytecode: the instruction
    after the call opens the block (SETUP_WITH up to 3.10, BEFORE_WITH 3.11-3.13, COPY +
    LOAD_SPECIAL __exit__ from 3.14). Any other shape (``ExitStack.enter_context(max_isa(L))``, a
    conditional expression) is False."""
    if frame is None:
        return False
    key = (frame.f_code, frame.f_lasti)
    found = _with_sites.get(key)
    if found is None:
        found = False
        ins = [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti][:2]
        if ins and ins[0].opname in ("SETUP_WITH", "BEFORE_WITH"):
            found = True
        elif (len(ins) == 2 and ins[0].opname == "COPY" and ins[1].opname == "LOAD_SPECIAL"
              and "exit" in str(ins[1].argval)):
            found = True
        if len(_with_sites) < 4096:
            _with_sites[key] = found
    return found


class max_isa:
    """Cap the ISA level onepath may use.

    ``onepath.max_isa("avx2")`` caps the whole process from now on (replacing ONEPATH_MAX_ISA and
    earlier calls); ``onepath.max_isa(None)`` lifts the process-wide cap. ``with
    onepath.max_isa("avx2"): ...`` caps only the calling thread (or asyncio task) for the block
    and never touches the process cap, so other threads keep their level throughout; nested blocks
    take the lowest cap. A scoped cap lowers the process cap, never raises it. One object may be
    entered by several threads at once, or again inside its own block. (An object made elsewhere,
    e.g. ``stack.enter_context(max_isa(L))`` or ``with (max_isa(L) if c else nullcontext()):``,
    caps the process from its creation until it is entered, as a bare call would. A generator
    suspended inside a block leaves its cap on the thread that iterates it until the block ends,
    as any ContextVar set in a generator does.)

    Args:
        level: one of ``available_isas()`` (case-insensitive), or None.
    Raises:
        ValueError: unknown level name, or a level this host cannot run (the message lists the
            valid levels).
        TypeError: level is not a str or None.
    """

    def __init__(self, level: str | None):
        _read_env()
        global _process_isa
        self.level = None if level is None else _check(level)
        # `with max_isa(L):` never touches the process cap, so no other thread sees L even for the
        # few instructions between this call and __enter__ (found by a concurrent test: results of
        # another thread computed at L). Any other use is a process-wide cap until entered.
        self._scoped_only = _called_as_with(sys._getframe(1))
        if self._scoped_only:
            return
        with _lock:
            _pending.append((weakref.ref(self), self.level))
            _prune()
            _process_isa = None
            for hook in on_change:
                hook()

    def __enter__(self):
        if not self._scoped_only:
            self._withdraw()
        token = _scoped.set(_min_level(self.level, _scoped.get()) or available_isas()[-1])
        _blocks.set(_blocks.get() + ((self, token),))
        return self

    def _withdraw(self) -> None:
        """Remove this object's process-wide entry (entering a `with` makes it scoped only)."""
        global _process_isa
        with _lock:
            for i in range(len(_pending) - 1, -1, -1):
                if _pending[i][0]() is self:
                    del _pending[i]
                    break
            _process_isa = None
            for hook in on_change:
                hook()

    def __exit__(self, *exc):
        blocks = _blocks.get()
        i = max((j for j, (obj, _) in enumerate(blocks) if obj is self), default=-1)
        if i < 0:
            raise RuntimeError(f"{self!r}: the block ends in another context (thread or asyncio "
                               "task) than it began in")
        _blocks.set(blocks[:i] + blocks[i + 1:])
        _scoped.reset(blocks[i][1])
        return False

    def __repr__(self):
        return f"onepath.max_isa({self.level!r})"
