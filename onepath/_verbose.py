"""``ONEPATH_VERBOSE=1``: one line per call on the ``onepath`` logger, in the spirit of ONEDNN_VERBOSE.

Line format (comma separated): ``onepath,exec,<op>,<dtypes>,<level>,<kernel>,<shapes>,threads=<n>,<ms>``.
"""
from __future__ import annotations

import logging
import os

logger = logging.getLogger("onepath")


def enabled() -> bool:
    """True when ONEPATH_VERBOSE is set to a non-zero value (read at every call, so it can be toggled)."""
    v = os.environ.get("ONEPATH_VERBOSE", "")
    return bool(v) and v not in ("0", "false", "False", "no")


def emit(op: str, dtypes: str, level: str, kernel: str, shapes: str, threads: int, seconds: float) -> None:
    """Log one verbose line; attaches a stderr handler if the application configured none."""
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.info("onepath,exec,%s,%s,%s,%s,%s,threads=%d,%.3fms",
                op, dtypes, level, kernel, shapes, threads, seconds * 1e3)
