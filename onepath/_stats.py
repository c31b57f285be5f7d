"""Which (op, dtype, level) kernels ran in this process (the test suite prints it; cheap set add)."""
from __future__ import annotations

_seen: set[tuple[str, str, str]] = set()
_seen_algo: set[tuple[str, str, str, str]] = set()


def record(op: str, dtype: str, level: str, algorithm: str | None = None) -> None:
    """Note that a kernel of ``level`` ran ``op`` on ``dtype`` (and which registry ``algorithm``,
    when the caller distinguishes them: matmul's "gemm" and "small")."""
    _seen.add((op, dtype, level))
    if algorithm is not None:
        _seen_algo.add((op, dtype, level, algorithm))


def exercised_algorithms() -> frozenset[tuple[str, str, str, str]]:
    """The (op, dtype, level, algorithm) quadruples recorded with an algorithm so far."""
    return frozenset(_seen_algo)


def exercised() -> frozenset[tuple[str, str, str]]:
    """The (op, dtype, level) triples that ran so far."""
    return frozenset(_seen)
