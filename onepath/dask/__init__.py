"""onepath inside Dask: ``matmul``, ``linear`` and ``conv2d`` on ``dask.array`` arrays with onepath's
kernel per block, and ``OnepathWorker``, the ``distributed`` worker plugin that keeps onepath's
threads within each worker's share of the cores.

    >>> import dask.array as da, numpy as np, onepath.dask as odask
    >>> a = da.ones((4096, 512), np.float32, chunks=(1024, 512))
    >>> odask.matmul(a, np.ones((512, 256), np.float32)).compute().shape
    (4096, 256)

Needs the ``dask`` extra (``pip install "onepath[dask]"``: ``dask[array]`` and ``distributed``).
"""
from __future__ import annotations

try:
    import dask.array  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(f"onepath.dask needs dask: pip install \"onepath[dask]\" ({exc})") from None

from ._array import conv2d, linear, matmul
from ._worker import OnepathWorker, policy, threads_for

__all__ = ["matmul", "linear", "conv2d", "OnepathWorker", "policy", "threads_for"]
