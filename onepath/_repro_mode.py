"""The reproducible mode switch: ``onepath.reproducible()``, ``onepath.set_reproducible()`` and
``ONEPATH_REPRODUCIBLE``.

Sources, strongest first: a scoped ``with onepath.reproducible():`` block (per thread / asyncio task,
held in a ContextVar, like ``max_isa``), the process-wide ``set_reproducible(bool)``, the
``ONEPATH_REPRODUCIBLE`` environment variable (read when onepath is imported). What the mode
guarantees is written in ``onepath/ops/_repro.py`` and the README.
"""
from __future__ import annotations

import contextvars
import os
import threading

import numpy as np

_FALSE = ("", "0", "false", "no", "off")
_scoped: contextvars.ContextVar[bool | None] = contextvars.ContextVar("onepath_reproducible", default=None)


def _parse_env(value: str) -> bool:
    v = value.strip().lower()
    if v in _FALSE:
        return False
    if v in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"ONEPATH_REPRODUCIBLE={value!r}: expected 1/true/yes/on or 0/false/no/off")


def env_error() -> str | None:
    """The one-line message for an invalid ONEPATH_REPRODUCIBLE, or None (valid or unset)."""
    try:
        _parse_env(os.environ.get("ONEPATH_REPRODUCIBLE", ""))
    except ValueError as exc:
        return str(exc)
    return None


# The process setting: True / False, or None while ONEPATH_REPRODUCIBLE holds an invalid value (the
# import succeeds, so `python -m onepath info` can say what is wrong; the first call raises).
try:
    _process: bool | None = _parse_env(os.environ.get("ONEPATH_REPRODUCIBLE", ""))
except ValueError:
    _process = None
_source = "ONEPATH_REPRODUCIBLE"  # what set _process last
# True once anything may have turned the mode on: until then ``on()`` is one global read.
_ever: bool = _process is not False
# Called once when ``_ever`` turns True (the small path's fast table, which skips ``on()``).
on_first_use: list = []


def _mark_used() -> None:
    global _ever
    if not _ever:
        _ever = True
        for fn in on_first_use:
            fn()


def on() -> bool:
    """True when the calling thread / task runs in reproducible mode (the ops' per-call test).

    Raises:
        ValueError: ONEPATH_REPRODUCIBLE is invalid (and no scoped block or set_reproducible decides).
    """
    if not _ever:
        return False
    s = _scoped.get()
    if s is None:
        if _process is None:
            raise ValueError(env_error() or "ONEPATH_REPRODUCIBLE: invalid value")
        return _process
    return s


def is_reproducible() -> bool:
    """Whether calls made here run in reproducible mode (a scoped block, else the process setting)."""
    return on()


def set_reproducible(enabled: bool) -> None:
    """Turn the reproducible mode on or off for the whole process (replaces ONEPATH_REPRODUCIBLE).
    A ``with onepath.reproducible(...)`` block still decides inside it.

    Raises:
        TypeError: enabled is not a bool (Python's or numpy's ``np.bool_``).
    """
    global _process, _source
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"set_reproducible(enabled) takes a bool, got {type(enabled).__name__}")
    enabled = bool(enabled)
    _process = enabled
    _source = f"onepath.set_reproducible({enabled})"
    if enabled:
        _mark_used()


def reason() -> str:
    """Where the mode in force comes from (for ``python -m onepath info``)."""
    s = _scoped.get() if _ever else None
    if s is not None:
        return f"a `with onepath.reproducible({s})` block"
    return _source if _process else "default"


class reproducible:
    """Scope the reproducible mode: ``with onepath.reproducible(): ...`` runs matmul, linear and
    conv2d/conv1d of the calling thread (or asyncio task) so that float32 and bfloat16 results are
    bit-identical at every ISA level, every thread count and on Intel and AMD (see the README);
    ``with onepath.reproducible(False):`` turns it off inside a reproducible process. Other threads
    are not affected; blocks nest.

    Args:
        enabled: True (default) or False.
    Raises:
        TypeError: enabled is not a bool (Python's or numpy's ``np.bool_``).
    """

    def __init__(self, enabled: bool = True):
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"reproducible(enabled) takes a bool, got {type(enabled).__name__}")
        self.enabled = bool(enabled)
        self._tokens: dict[int, list] = {}  # per thread: one object may scope several threads at once

    def __enter__(self):
        _mark_used()
        self._tokens.setdefault(threading.get_ident(), []).append(_scoped.set(self.enabled))
        return self

    def __exit__(self, *exc):
        tokens = self._tokens[threading.get_ident()]
        _scoped.reset(tokens.pop())
        if not tokens:
            del self._tokens[threading.get_ident()]
        return False

    def __repr__(self):
        return f"onepath.reproducible({self.enabled})"
