"""Thread count used by the kernels (``onepath.set_num_threads`` / ``ONEPATH_NUM_THREADS``).

The kernels never run more threads than the CPUs of this process's affinity mask (read once): more
threads than CPUs only take turns on them (a 512^3 product on 2 CPUs with 66 threads runs ~5x
slower). A larger request is kept as the request, used up to that many CPUs, and warned about once.
"""
from __future__ import annotations

import operator
import os
import warnings

_num_threads: int | None = None
_env_threads: int | None = None  # ONEPATH_NUM_THREADS once read and valid (0: not set)
_cpus: int | None = None  # the affinity mask's CPU count, read once
_warned = False
MAX_THREADS = 1024  # a request above this is a mistake, not a machine


def _affinity_cpus() -> int:
    global _cpus
    if _cpus is None:
        try:
            _cpus = max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not Linux
            _cpus = os.cpu_count() or 1
    return _cpus


def _check_range(n: int, source: str, shown) -> int:
    if n < 1 or n > MAX_THREADS:
        raise ValueError(f"{source} must be an integer from 1 to {MAX_THREADS}, got {shown!r}")
    return n


def parse_env(value: str) -> int:
    """``ONEPATH_NUM_THREADS``'s text -> int. Raises ValueError (naming the variable and the valid
    values) for anything but a decimal integer from 1 to 1024."""
    try:
        n = int(value.strip(), 10)
    except ValueError:
        raise ValueError(f"ONEPATH_NUM_THREADS must be an integer from 1 to {MAX_THREADS}, "
                         f"got {value!r}") from None
    return _check_range(n, "ONEPATH_NUM_THREADS", value)


def _limit(n: int, source: str) -> int:
    """n capped at the affinity mask's CPU count; warns (once per process) when that caps it."""
    global _warned
    cpus = _affinity_cpus()
    if n <= cpus:
        return n
    if not _warned:
        _warned = True
        warnings.warn(f"onepath: {source} asks for {n} threads but this process may run on {cpus} "
                      f"CPUs (its affinity mask); the kernels use at most {cpus}",
                      RuntimeWarning, stacklevel=3)
    return cpus


def set_num_threads(n: int) -> None:
    """Set how many threads the kernels may use (process-wide; like torch.set_num_threads).

    Args:
        n: an int (or any integer type with ``__index__``, e.g. numpy.int64) from 1 to 1024. The
            kernels use at most the CPUs of this process's affinity mask (a larger n warns once)
            and fewer on small problems.
    Raises:
        TypeError: n is not an integer (a float, a str, a bool).
        ValueError: n is outside 1..1024.
    """
    global _num_threads
    if isinstance(n, bool):
        raise TypeError("set_num_threads(n) takes an int, got a bool")
    try:
        value = operator.index(n)
    except TypeError:
        raise TypeError(f"set_num_threads(n) takes an int, got {type(n).__name__} {n!r}") from None
    _num_threads = _check_range(value, "set_num_threads(n)", n)
    _limit(value, f"set_num_threads({value})")


def get_num_threads() -> int:
    """Threads the kernels use: ``set_num_threads``, else ``ONEPATH_NUM_THREADS`` (read once), else
    the number of CPUs this process may run on (its affinity mask, read once), and never more than
    that number.

    Raises:
        ValueError: ONEPATH_NUM_THREADS (read while no set_num_threads call is in force) is not an
            integer from 1 to 1024.
    """
    global _env_threads
    if _num_threads is not None:
        return _limit(_num_threads, f"set_num_threads({_num_threads})")
    if _env_threads is None:  # read once; a bad value raises at every call until set_num_threads
        env = os.environ.get("ONEPATH_NUM_THREADS", "").strip()
        _env_threads = parse_env(env) if env else 0
    if not _env_threads:
        return _affinity_cpus()
    return _limit(_env_threads, f"ONEPATH_NUM_THREADS={_env_threads}")
