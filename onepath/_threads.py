"""Thread count used by the kernels (``onepath.set_num_threads`` / ``ONEPATH_NUM_THREADS``)."""
from __future__ import annotations

import operator
import os

_num_threads: int | None = None
_default: int | None = None  # the affinity mask's CPU count, read once
MAX_THREADS = 1024  # kernels create their threads per call; more than this is a mistake, not a machine


def _parse(value, source: str) -> int:
    try:
        n = int(value, 10) if isinstance(value, str) else operator.index(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a positive integer, got {value!r}") from None
    if n < 1 or isinstance(value, bool):
        raise ValueError(f"{source} must be a positive integer, got {value!r}")
    if n > MAX_THREADS:
        raise ValueError(f"{source} must be at most {MAX_THREADS}, got {value!r}")
    return n


def set_num_threads(n: int) -> None:
    """Set how many threads the kernels may use (process-wide; like torch.set_num_threads).

    Args:
        n: an int from 1 to 1024. Kernels may use fewer on small problems.
    Raises:
        ValueError: n is not an integer in that range.
    """
    global _num_threads
    if isinstance(n, str):
        raise ValueError(f"set_num_threads(n) takes an int, got the string {n!r}")
    _num_threads = _parse(n, "set_num_threads(n)")


def get_num_threads() -> int:
    """Threads the kernels may use: ``set_num_threads``, else ``ONEPATH_NUM_THREADS``, else the
    number of CPUs this process may run on (its affinity mask, read once)."""
    if _num_threads is not None:
        return _num_threads
    global _default
    if _default is None:
        env = os.environ.get("ONEPATH_NUM_THREADS", "").strip()
        if env:
            return _parse(env, "ONEPATH_NUM_THREADS")  # not cached: a bad value raises at every call
        try:
            _default = max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not Linux
            _default = os.cpu_count() or 1
    return _default
