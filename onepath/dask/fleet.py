"""``python -m onepath bench --dask ADDRESS|local``: the benchmark on every machine of a Dask cluster,
and ``--model minilm --dask local``: all-MiniLM-L6-v2 through ``onepath.dask.linear``.

Fleet: one worker per distinct host (workers grouped by the host address the scheduler reports)
runs the chosen suites with ``onepath.bench.cli.run`` as a task; each run's JSON document has the
shape ``bench --json`` writes (plus a ``dask`` entry naming the host and worker) and is written per
host; the client prints each host's header lines and one table with a column group per host.
``local`` starts a ``LocalCluster`` of 2 worker processes x 1 thread.
"""
from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

LOCAL_WORKERS, LOCAL_THREADS = 2, 1


MALLOC_VAR = "MALLOC_TRIM_THRESHOLD_"


@contextlib.contextmanager
def _spawn_environ_without_malloc_trim():
    """distributed's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536 (its default
    ``distributed.nanny.pre-spawn-environ``, also put in this process's environment, which the
    workers inherit). Setting it turns off glibc's dynamic mmap threshold, so every numpy
    temporary above 128 KiB becomes a fresh mmap with its page faults: measured here, LayerNorm on
    (1000, 384) float32 ran 4x slower in such a worker. The LocalCluster of the benches starts its
    workers without it (the thread variables stay)."""
    import os

    import dask
    env = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
           if k != MALLOC_VAR}
    saved = os.environ.pop(MALLOC_VAR, None)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
            yield
    finally:
        if saved is not None:
            os.environ[MALLOC_VAR] = saved


@contextlib.contextmanager
def connect(address: str, n_workers: int = LOCAL_WORKERS, threads_per_worker: int = LOCAL_THREADS):
    """A ``distributed.Client`` on the scheduler at ``address``, or on a new LocalCluster of
    ``n_workers`` processes x ``threads_per_worker`` threads for ``"local"`` (workers started
    without MALLOC_TRIM_THRESHOLD_, see ``_spawn_environ_without_malloc_trim``); closed on exit."""
    from distributed import Client, LocalCluster
    if address == "local":
        with _spawn_environ_without_malloc_trim(), \
                LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                             dashboard_address=":0", worker_dashboard_address=None) as cluster, \
                Client(cluster) as client:
            client.wait_for_workers(n_workers)
            yield client
    else:
        with Client(address) as client:
            yield client


def worker_per_host(client) -> dict[str, str]:
    """{host label: worker address}: one worker (the one with the most threads, then the lowest
    address) per distinct host; the label is the host's name (``socket.gethostname`` run there),
    with its address added when two hosts share a name."""
    import socket
    workers = client.scheduler_info(n_workers=-1)["workers"] if _takes_n_workers(client) \
        else client.scheduler_info()["workers"]
    by_host: dict[str, list] = {}
    for addr, w in workers.items():
        by_host.setdefault(w.get("host") or addr, []).append((-int(w.get("nthreads", 1)), addr))
    chosen = {host: sorted(ws)[0][1] for host, ws in sorted(by_host.items())}
    names = client.run(socket.gethostname, workers=list(chosen.values()))
    labels = [names.get(a, h) for h, a in chosen.items()]
    out = {}
    for (host, addr), name in zip(chosen.items(), labels):
        out[name if labels.count(name) == 1 else f"{name}@{host}"] = addr
    return out


def _takes_n_workers(client) -> bool:
    import inspect
    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _bench_task(kwargs: dict) -> tuple[dict, str]:
    """Run in a worker: the bench with its printed output captured."""
    import onepath
    from onepath.bench import cli
    kwargs = dict(kwargs)
    if kwargs.get("threads") is None:  # the whole host: one run per machine
        import os
        try:
            kwargs["threads"] = len(os.sched_getaffinity(0))
        except AttributeError:
            kwargs["threads"] = onepath.get_num_threads()
    out = io.StringIO()
    doc = cli.run(out=out, progress=False, json_path=None, **kwargs)
    return doc, out.getvalue()


def json_path_for(base: str | None, host: str) -> Path:
    """Per-host JSON file: ``BASE`` with ``.HOST`` before its suffix (``fleet.json`` ->
    ``fleet.HOST.json``), default ``onepath-bench.HOST.json`` in the current directory."""
    p = Path(base or "onepath-bench.json")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in host)
    return p.with_name(f"{p.stem}.{safe}{p.suffix or '.json'}")


def fleet_table(docs: dict[str, dict]) -> tuple[str, list[str], list[list[str]]]:
    """(title, headers, cells): one row per (suite, group, shape), one column group per host:
    ``HOST: onepath GFLOP/s`` and ``HOST: x BASELINE`` for each baseline that host measured."""
    from onepath.bench.cli import _fmt
    keys: list[tuple] = []
    rows: dict[tuple, dict[str, dict]] = {}
    baselines: dict[str, list[str]] = {}
    for host, doc in docs.items():
        baselines[host] = list(dict.fromkeys(b for r in doc["results"] for b in r.get("ratios", {})))
        for r in doc["results"]:
            key = (r.get("suite"), r.get("group", ""), r.get("name"))
            if key not in rows:
                keys.append(key)
                rows[key] = {}
            rows[key][host] = r
    headers = ["group", "shape"]
    for host in docs:
        headers += [f"{host}: onepath GFLOP/s"] + [f"{host}: x {b}" for b in baselines[host]]
    cells = []
    for key in keys:
        line = [key[1], key[2]]
        for host in docs:
            r = rows[key].get(host)
            line.append(_fmt(r["impls"]["onepath"].get("gflops")) if r else "-")
            line += [_fmt(r["ratios"].get(b), ".2f") if r else "-" for b in baselines[host]]
        cells.append(line)
    return f"onepath bench on {len(docs)} host{'s' * (len(docs) != 1)}", headers, cells


def run_fleet(address: str, *, threads=None, isa_level=None, quick=False, suites=None, shapes=None,
              repeat=None, min_time=None, json_path=None, peak=True, out=None) -> dict[str, dict]:
    """Run the bench once per worker host of the cluster at ``address`` (``"local"``: a LocalCluster
    of 2 processes x 1 thread); print each host's header and one table with a column group per
    host; write one JSON per host (``json_path_for``). Returns {host: bench document}."""
    from onepath.bench.cli import header_lines, print_table, torch_cap_header
    out = out or sys.stdout
    kwargs = dict(threads=threads, isa_level=isa_level, quick=quick, suites=suites, shapes=shapes,
                  repeat=repeat, min_time=min_time, peak=peak)
    with connect(address) as client:
        hosts = worker_per_host(client)
        futures = {host: client.submit(_bench_task, kwargs, workers=[addr], allow_other_workers=False,
                                       pure=False, key=f"onepath-bench-{host}-{time.time_ns()}")
                   for host, addr in hosts.items()}
        docs = {}
        for host, fut in futures.items():
            doc, _text = fut.result()
            doc["command"] = sys.argv  # the command run here (the worker saw its own argv)
            doc["dask"] = {"host": host, "worker": hosts[host], "scheduler": client.scheduler.address}
            docs[host] = doc
    for host, doc in docs.items():
        print(f"== {host} ({hosts[host]})", file=out)
        for line in header_lines(doc["fingerprint"]):
            print("  " + line, file=out)
        peaks = [f"{p['level']} {p['gflops']:.1f}" for p in doc.get("peak", []) if p.get("gflops")]
        if peaks:
            print(f"  FMA peak GFLOP/s ({doc['fingerprint']['threads']} threads): " + ", ".join(peaks), file=out)
        for line in (doc.get("peak_checks") or {}).get("notes", []):   # that host's shared-cores warnings
            print("  " + line, file=out)
        for line in torch_cap_header(doc.get("torch_cap")):              # torch capped with onepath
            print("  " + line, file=out)
        path = json_path_for(json_path, host)
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"  wrote {path}", file=out)
    print(file=out)
    print_table(*fleet_table(docs), file=out)
    print("x BASELINE = BASELINE time / onepath time on that host (> 1: onepath is faster).", file=out)
    return docs


# ------------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2 through onepath.dask.linear


def _embed_block(ids, *, word, position, token_type, gamma, beta, eps, plan, block_id=None):
    """Token rows of one sentence batch (flattened b x s ids) -> LayerNorm(embeddings), (b*s, d),
    with ``onepath.layer_norm`` as the single-process encoder (minilm.OnepathImpl) runs it."""
    import onepath
    b, s = plan[block_id[0]]
    ids = ids.reshape(b, s)
    h = word[ids] + position[:s][np.newaxis] + token_type[np.zeros_like(ids)]
    return onepath.layer_norm(h, h.shape[-1:], gamma, beta, eps, out=h).reshape(b * s, -1)


def _attention_block(qkv, mask, *, heads, plan, block_id=None):
    """Self-attention of one batch, as minilm.EncoderLayer computes it with minilm.OnepathImpl
    (float32: ``onepath.attention``); qkv: the layer's fused [q | k | v] Linear output (b*s, 3d)."""
    from onepath.bench.minilm import OnepathImpl, attention, key_mask
    b, s = plan[block_id[0]]
    return attention(qkv, key_mask(mask.reshape(b, s)), b, s, heads, OnepathImpl(np.float32))


def _add_norm_block(x, res, *, gamma, beta, eps):
    """LayerNorm(x + res) in one ``onepath.layer_norm`` pass, as minilm.OnepathImpl runs it."""
    import onepath
    return onepath.layer_norm(x, x.shape[-1:], gamma, beta, eps, residual=res)


def _pool_block(h, mask, *, plan, block_id=None):
    b, s = plan[block_id[0]]
    h = h.reshape(b, s, -1)
    m = mask.reshape(b, s).astype(np.float32)[..., None]
    pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def minilm_graph(model, batches, weights: dict):
    """The sentence embeddings of ``batches`` (tokenized (ids, mask, types) per batch) as a dask
    array (sentences, hidden), one chunk per batch: every Linear through ``onepath.dask.linear``,
    the rest per block as the numpy model computes it. ``weights``: id(numpy weight) -> the dask
    array it is sent as (persisted once on the cluster)."""
    import dask.array as da

    from . import linear
    from ._array import _operand
    plan = tuple(bt[0].shape for bt in batches)
    rows = tuple(b * s for b, s in plan)
    ids = da.from_array(np.concatenate([bt[0].ravel() for bt in batches]), chunks=(rows,))
    mask = da.from_array(np.concatenate([bt[1].ravel() for bt in batches]), chunks=(rows,))
    d = model.word.shape[1]
    en = model.emb_norm

    def W(a):
        return weights.get(id(a), a)

    def T(a):  # an embedding table: one key read whole by each block
        return _operand(W(a), "table")[0]

    h = ids.map_blocks(_embed_block, word=T(model.word), position=T(model.position),
                       token_type=T(model.token_type), gamma=en.gamma, beta=en.beta, eps=en.eps,
                       plan=plan, new_axis=1, chunks=(rows, (d,)), dtype=np.float32,
                       meta=np.empty((0, 0), np.float32))

    def lin(layer, x):
        return linear(x, W(layer.weight), W(layer.bias), activation=layer.activation)

    for L in model.layers:
        ctx = da.map_blocks(_attention_block, lin(L.qkv, h), mask[:, None], heads=L.heads, plan=plan,
                            dtype=np.float32, chunks=(rows, (d,)), meta=np.empty((0, 0), np.float32))
        a = da.map_blocks(_add_norm_block, lin(L.attn_out, ctx), h, gamma=L.attn_norm.gamma,
                          beta=L.attn_norm.beta, eps=L.attn_norm.eps, dtype=np.float32)
        f = lin(L.ffn_out, lin(L.ffn_in, a))
        h = da.map_blocks(_add_norm_block, f, a, gamma=L.ffn_norm.gamma, beta=L.ffn_norm.beta,
                          eps=L.ffn_norm.eps, dtype=np.float32)
    return da.map_blocks(_pool_block, h, mask[:, None], plan=plan, dtype=np.float32,
                         chunks=(tuple(b for b, _ in plan), (d,)), meta=np.empty((0, 0), np.float32))


def minilm_bench(address: str = "local", *, sentences: int = 20000, batch: int = 64, threads=None,
                 isa_level=None, repeat: int | None = None, quick: bool = False, json_path=None,
                 out=None) -> dict:
    """Embed the bundled sentences repeated to ``sentences`` with all-MiniLM-L6-v2 on the cluster
    (``"local"``: LocalCluster, 2 processes x 1 thread, with ``OnepathWorker``) through
    ``onepath.dask.linear``, and in this process (``onepath.linear``, ``threads`` threads); print
    sentences/s of both (median of ``repeat`` alternated runs) and the largest difference between
    the two embeddings. Returns the JSON document (also written to ``json_path``)."""
    import dask.array as da

    import onepath
    from onepath.bench import minilm
    from onepath.bench.cli import bench_environment, fingerprint, header_lines, print_table, validate_isa

    from . import OnepathWorker
    out = out or sys.stdout
    isa_level = validate_isa(isa_level)
    threads = threads or onepath.get_num_threads()
    repeat = repeat if repeat is not None else (1 if quick else 3)
    model, tok = minilm.load()
    base = minilm.read_sentences()
    texts = (base * (sentences // len(base) + 1))[:sentences]
    batches = [minilm.tokenize(tok, texts[i:i + batch]) for i in range(0, len(texts), batch)]
    tokens = int(sum(int(bt[1].sum()) for bt in batches))
    impl = minilm.OnepathImpl(np.float32)

    def single(bs=batches):
        return np.concatenate([model.encode(*bt, matmul=impl) for bt in bs])

    with bench_environment(threads, isa_level), connect(address) as client:
        client.register_plugin(OnepathWorker())
        fp = fingerprint(threads)
        for line in header_lines(fp):
            print(line, file=out)
        nworkers = len(client.scheduler_info()["workers"])
        wthreads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
        # every weight one persisted key on the cluster: sent to each worker once for all runs
        arrays = [model.word, model.position, model.token_type]
        for L in model.layers:
            for lin in (L.qkv, L.attn_out, L.ffn_in, L.ffn_out):
                arrays += [lin.weight, lin.bias]
        weights = {id(a): da.from_array(a, chunks=a.shape) for a in arrays}
        with warnings.catch_warnings():  # "Sending large graph": the weights, sent once on purpose
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            persisted = client.persist(list(weights.values()))
        weights = dict(zip(weights, persisted))

        def on_dask(bs=batches):
            return client.compute(minilm_graph(model, bs, weights)).result()

        warm = batches[: 2 * nworkers]
        single(warm), on_dask(warm)  # warm-up: packing here and on every worker, weights fetched
        times: dict[str, list] = {"single process": [], "dask": []}
        embs = {}
        for _ in range(repeat):
            for name, fn in (("single process", single), ("dask", on_dask)):
                t0 = time.perf_counter()
                embs[name] = fn()
                times[name].append(time.perf_counter() - t0)
        emb_single, emb_dask = embs["single process"], embs["dask"]
    rows = {name: {"seconds": statistics.median(ts), "best_seconds": min(ts),
                   "sentences_per_s": len(texts) / statistics.median(ts),
                   "tokens_per_s": tokens / statistics.median(ts)} for name, ts in times.items()}
    labels = {"single process": f"single process, onepath.linear, {threads} threads",
              "dask": f"dask {address}: {nworkers} workers, {wthreads} threads, onepath.dask.linear"}
    print(file=out)
    print_table(f"all-MiniLM-L6-v2: {len(texts)} sentences, {tokens} tokens, batch {batch}, median of {repeat}",
                ["run", "sentences/s", "tokens/s", "seconds"],
                [[labels[n], f"{r['sentences_per_s']:.1f}", f"{r['tokens_per_s']:.0f}", f"{r['seconds']:.2f}"]
                 for n, r in rows.items()], file=out)
    diff = float(np.abs(emb_dask - emb_single).max())
    same = bool(np.array_equal(emb_dask, emb_single))
    ratio = rows["single process"]["seconds"] / rows["dask"]["seconds"]
    print(f"\ndask / single process speed: x{ratio:.2f}; embeddings "
          + ("bit-identical" if same else f"differ by at most {diff:.2e}"), file=out)
    doc = {"schema": 1, "model": "all-MiniLM-L6-v2", "fingerprint": fp,
           "options": {"threads": threads, "isa": isa_level, "batch": batch, "repeat": repeat,
                       "sentences": len(texts), "tokens": tokens, "dask": address,
                       "workers": nworkers, "worker_threads": wthreads},
           "results": rows, "ratio": ratio, "max_abs_diff": diff, "bit_identical": same,
           "ok": bool(diff < 1e-5)}
    if json_path:
        Path(json_path).write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"wrote {json_path}", file=sys.stderr)
    return doc


def main(args) -> int:
    """The ``--dask`` hook of ``python -m onepath bench`` (arguments as its parser makes them)."""
    from onepath.bench.cli import BenchError
    try:
        if args.model == "minilm":
            from onepath.bench import minilm
            try:
                doc = minilm_bench(args.dask, sentences=args.sentences or 20000, batch=args.batch,
                                   threads=args.threads, isa_level=args.isa, repeat=args.repeat,
                                   quick=args.quick, json_path=args.json)
            except minilm.ModelMissing as exc:
                print(f"onepath: {exc}", file=sys.stderr)
                return 1
            return 0 if doc["ok"] else 1
        if args.what == "conv" or args.desc:
            raise BenchError("--dask runs the kernel suites (--suite) or --model minilm; "
                             "`bench conv` / --desc are not distributed yet")
        docs = run_fleet(args.dask, threads=args.threads, isa_level=args.isa, quick=args.quick,
                         suites=args.suite, shapes=args.shapes, repeat=args.repeat,
                         min_time=args.min_time, json_path=args.json, peak=not args.no_peak)
        return 0 if all(d["ok"] for d in docs.values()) else 1
    except BenchError as exc:
        print(f"onepath: error: {exc}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------------------------------------
# The cost of Dask: a large float32 matmul on the cluster against in-process onepath.matmul


def matmul_throughput(address: str = "local", m: int = 16384, k: int = 4096, n: int = 4096, *,
                      row_chunk: int = 2048, threads: int | None = None, repeat: int = 3,
                      out=None) -> dict:
    """GFLOP/s of ``onepath.dask.matmul`` on (m, k) x (k, n) float32 operands held by the cluster
    (A in row chunks of ``row_chunk``, B one chunk; the product persisted on the workers) and of
    ``onepath.matmul`` on the same problem in this process at ``threads`` threads (default: the
    cluster's worker threads), alternated ``repeat`` times; best and median seconds of each and
    the ratio dask / in-process of the best times. ``"local"``: LocalCluster 2 processes x 1 thread
    with ``OnepathWorker``."""
    import dask.array as da
    from distributed import wait

    import onepath

    from . import OnepathWorker, matmul
    out = out or sys.stdout
    flops = 2.0 * m * n * k
    with connect(address) as client:
        client.register_plugin(OnepathWorker())
        wthreads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
        threads = threads or wthreads
        rng = da.random.default_rng(0)
        A = rng.standard_normal((m, k), dtype=np.float32, chunks=(row_chunk, k))
        B = rng.standard_normal((k, n), dtype=np.float32, chunks=(k, n))
        A, B = client.persist([A, B])
        wait([A, B])
        a, b = A.compute(), B.compute()  # the same operands in this process
        previous = onepath.get_num_threads()
        onepath.set_num_threads(threads)
        times = {"onepath.matmul": [], "onepath.dask.matmul": []}
        try:
            for i in range(repeat + 1):  # the first round warms up (packing buffers, B on workers)
                t0 = time.perf_counter()
                c = onepath.matmul(a, b)
                t1 = time.perf_counter()
                del c
                C = client.persist(matmul(A, B))
                wait(C)
                t2 = time.perf_counter()
                del C
                if i:
                    times["onepath.matmul"].append(t1 - t0)
                    times["onepath.dask.matmul"].append(t2 - t1)
        finally:
            onepath.set_num_threads(previous)
    res = {name: {"best_seconds": min(ts), "median_seconds": statistics.median(ts),
                  "gflops": flops / min(ts) / 1e9} for name, ts in times.items()}
    ratio = res["onepath.matmul"]["best_seconds"] / res["onepath.dask.matmul"]["best_seconds"]
    print(f"({m}, {k}) x ({k}, {n}) float32, best of {repeat}: onepath.matmul {threads} threads "
          f"{res['onepath.matmul']['gflops']:.1f} GFLOP/s; onepath.dask.matmul on {address} "
          f"({wthreads} worker threads, A in {row_chunk}-row chunks) "
          f"{res['onepath.dask.matmul']['gflops']:.1f} GFLOP/s; ratio {ratio:.2f} (medians: "
          f"{res['onepath.matmul']['median_seconds']:.2f} s / {res['onepath.dask.matmul']['median_seconds']:.2f} s)",
          file=out)
    return {"shape": (m, k, n), "threads": threads, "worker_threads": wthreads, "results": res,
            "times": times, "ratio": ratio}
