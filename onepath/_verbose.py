"""``ONEPATH_VERBOSE=1``: one line per call on the ``onepath`` logger, in the spirit of ONEDNN_VERBOSE.

Line format (comma separated): ``onepath,exec,<op>,<dtypes>,<level>,<kernel>,<shapes>,threads=<n>,<ms>``.
"""
from __future__ import annotations

import contextlib
import os
import threading


_enabled: bool | None = None
_local = threading.local()  # .muted: depth of ``muted()`` blocks on this thread
# functions called after every reload (caches of fast paths that hold "verbose is off")
on_reload: list = []


def reload() -> bool:
    """Re-read ONEPATH_VERBOSE (it is read once, at the first call, like ONEDNN_VERBOSE)."""
    global _enabled
    v = os.environ.get("ONEPATH_VERBOSE", "")
    _enabled = bool(v) and v not in ("0", "false", "False", "no")
    for hook in on_reload:
        hook()
    return _enabled


def enabled() -> bool:
    """True when ONEPATH_VERBOSE is set to a non-zero value."""
    return _enabled if _enabled is not None else reload()


@contextlib.contextmanager
def muted():
    """No lines from the calls inside this block (this thread only): a call that runs another op
    inside (``ops.linear.kernel_activation``) logs its own line, not the inner one's."""
    _local.muted = getattr(_local, "muted", 0) + 1
    try:
        yield
    finally:
        _local.muted -= 1


def emit(op: str, dtypes: str, level: str, kernel: str, shapes: str, threads: int, seconds: float) -> None:
    """Log one verbose line (none inside ``muted()``); attaches a stderr handler if the application
    configured none."""
    if getattr(_local, "muted", 0):
        return
    import logging  # only when a line is written: keeps ``import onepath`` cheap
    logger = logging.getLogger("onepath")
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.info("onepath,exec,%s,%s,%s,%s,%s,threads=%d,%.3fms",
                op, dtypes, level, kernel, shapes, threads, seconds * 1e3)
