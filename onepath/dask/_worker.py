"""The thread policy of onepath inside ``distributed`` workers (``OnepathWorker``).

A worker runs ``nthreads`` tasks at once, and several worker processes may share one machine; a
native pool sized from the whole machine in every task thread oversubscribes the cores (the reason
Dask's nanny sets OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS to 1). onepath reads
its thread count per call (``onepath.set_num_threads``), so the plugin sets it to the worker's
share and sets it again before every task, so a worker process reused by later tasks (or clients)
never keeps a count a previous task changed.

Alternative without the plugin: the Dask config ``distributed.nanny.pre-spawn-environ`` with
``ONEPATH_NUM_THREADS: "1"`` (read by onepath at its first call in each worker process).

The same setting holds ``MALLOC_TRIM_THRESHOLD_: 65536`` by default, which turns off glibc's dynamic
mmap threshold in the workers: numpy temporaries above 128 KiB are then fresh mmaps (measured: a
LayerNorm 4x slower than in the client). The policy reports it; ``bench --dask local`` starts its
workers without it (``onepath.dask.fleet.connect``).
"""
from __future__ import annotations

import os

import onepath

try:
    from distributed import WorkerPlugin
except ImportError:  # pragma: no cover - dask.array without distributed
    WorkerPlugin = object

_POLICY: dict | None = None  # set in a worker by OnepathWorker.setup; read by `info`


def policy() -> dict | None:
    """The thread policy applied in this process by ``OnepathWorker`` (a dict: worker threads,
    cores of the worker's share, onepath threads per task, how the share was found), or None
    outside a worker that has the plugin."""
    return None if _POLICY is None else dict(_POLICY)


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_for(cores: int, worker_threads: int) -> int:
    """onepath threads per task so that ``worker_threads`` tasks at once use at most ``cores``:
    ``max(1, cores // worker_threads)`` (1 when the worker has more threads than cores)."""
    return max(1, int(cores) // max(1, int(worker_threads)))


class OnepathWorker(WorkerPlugin):
    """``distributed`` worker plugin: onepath threads per task = the worker's cores / its threads.

    ``client.register_plugin(onepath.dask.OnepathWorker())`` applies it on every current and future
    worker (and again on restarted ones). The worker's cores are the CPUs of its affinity mask,
    divided among the worker processes on the same host in proportion to their threads (asked of
    the scheduler at setup), unless ``cores`` is given.

    Args:
        cores: cores this worker may use (default: its share as above).
        threads: onepath threads per task (default: ``threads_for(cores, worker threads)``).
    Raises:
        ValueError: cores or threads below 1.
    ``python -m onepath info`` / ``onepath.info.collect()`` inside the worker (``client.run``)
    reports the policy under ``dask_worker``.
    """

    name = "onepath"

    def __init__(self, cores: int | None = None, threads: int | None = None):
        for what, v in (("cores", cores), ("threads", threads)):
            if v is not None and int(v) < 1:
                raise ValueError(f"OnepathWorker: {what} must be >= 1, got {v!r}")
        self.cores = cores
        self.threads = threads
        self._per_task = None

    async def setup(self, worker):
        global _POLICY
        nthreads = worker.state.nthreads
        affinity = _affinity()
        source = "cores argument"
        cores = self.cores
        if cores is None:
            host_threads, peers = nthreads, 1
            try:
                ident = await worker.scheduler.identity()
                mine = ident["workers"].get(worker.address, {}).get("host") or worker.ip
                same = {a: w for a, w in ident["workers"].items() if w.get("host") == mine}
                same[worker.address] = {"nthreads": nthreads}
                host_threads = sum(int(w.get("nthreads", 1)) for w in same.values())
                peers = len(same)
            except Exception:  # noqa: BLE001 - scheduler unreachable: this process's mask only
                pass
            cores = max(1, affinity * nthreads // max(host_threads, nthreads))
            source = (f"affinity mask ({affinity} cpus) shared by {peers} worker process"
                      f"{'es' * (peers > 1)} ({host_threads} threads) on this host")
        per_task = self.threads or threads_for(cores, nthreads)
        self._per_task = per_task
        onepath.set_num_threads(per_task)
        _POLICY = {"plugin": "onepath.dask.OnepathWorker", "worker": worker.address,
                   "worker_threads": nthreads, "cores": int(cores), "affinity_cpus": affinity,
                   "onepath_threads": per_task, "source": source, "reapplied": 0,
                   # set by distributed's nanny by default; slows numpy temporaries (see fleet.py)
                   "malloc_trim_threshold": os.environ.get("MALLOC_TRIM_THRESHOLD_")}

    def transition(self, key, start, finish, **kwargs):
        """Before each task: onepath's thread count back to the policy (a task may change it)."""
        if finish == "executing" and self._per_task is not None:
            if onepath.get_num_threads() != self._per_task:
                onepath.set_num_threads(self._per_task)
                if _POLICY is not None:
                    _POLICY["reapplied"] += 1

    def teardown(self, worker):
        global _POLICY
        _POLICY = None
