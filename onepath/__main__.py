"""Command line: ``python -m onepath info [--json]``, ``python -m onepath bench [...]``,
``python -m onepath bench compare RUN.json ...`` and ``python -m onepath golden --write|--check FILE``,
``python -m onepath tune [...]``
(also installed as the ``onepath`` console script)."""
from __future__ import annotations

import argparse
import os
import sys


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive sizes, got {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onepath", description="onepath: CPU matmul/conv kernels with run-time ISA dispatch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", help="CPU, OS support, ISA level in force and the kernels it selects",
                          description="Report what onepath sees on this machine.")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument("--all", action="store_true", help="list every decoded CPU feature")
    info.add_argument("--no-py-cpuinfo", action="store_true",
                      help="skip the (slow) py-cpuinfo comparison")

    bench = sub.add_parser(
        "bench", help="benchmark onepath against numpy (and other baselines)",
        description="Measure onepath against its baselines, alternately in one process. For a fair "
                    "numpy baseline, run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset "
                    "(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m onepath bench). "
                    "`python -m onepath bench compare RUN.json ...` puts saved --json runs side by side.")
    bench.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                       help="threads for onepath and numpy's BLAS (default: onepath.get_num_threads())")
    bench.add_argument("--isa", metavar="LEVEL", default=None,
                       help="cap the ISA level for the run (one of onepath.available_isas()); the torch "
                            "baseline is capped alike (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY; the header "
                            "shows an ONEDNN_VERBOSE probe)")
    bench.add_argument("--quick", action="store_true", help="fewer shapes, shorter timing (one to two minutes)")
    bench.add_argument("--json", metavar="FILE", default=None,
                       help="also write the results and machine fingerprint as JSON")
    bench.add_argument("--save", action="store_true",
                       help="also write the run's JSON (fingerprint, raw timing samples) to "
                            "benchmarks/results/<vendor>-<uarch>/ in the repository")
    bench.add_argument("--model", choices=["minilm"], default=None,
                       help="run a model end to end instead of the kernel suites "
                            "(minilm: all-MiniLM-L6-v2 sentence encoder)")
    bench.add_argument("--suite", action="append", metavar="NAME", default=None,
                       help="run only this suite (repeatable); --list-suites shows them")
    bench.add_argument("--list-suites", action="store_true", help="list the suites and exit")
    bench.add_argument("what", nargs="?", choices=["conv"], default=None,
                       help="conv: only the convolution suites (ResNet-50, MobileNet dw), or --desc")
    bench.add_argument("--desc", action="append", default=None, metavar="DESC|FILE",
                       help="with `bench conv`: benchdnn conv descriptor(s) (e.g. "
                            "mb1ic64ih56oc64oh56kh3ph1) or a file of them, one per line (repeatable)")
    bench.add_argument("--mb", type=_positive_int, default=None, help="with --desc: override the batch")
    bench.add_argument("--reproducible", action="store_true",
                       help="run onepath in reproducible mode (onepath.reproducible()); "
                            "`--suite reproducible` times it against the default mode")
    bench.add_argument("--dask", metavar="ADDRESS|local", default=None,
                       help="run on a Dask cluster (scheduler ADDRESS, or `local` for a LocalCluster of "
                            "2 processes x 1 thread): the suites once per worker host (one JSON per "
                            "host, one table), or --model minilm through onepath.dask.linear")
    # Undocumented knobs for tests and quick looks.
    bench.add_argument("--shapes", type=_sizes, default=None, help=argparse.SUPPRESS)
    bench.add_argument("--repeat", type=_positive_int, default=None, help=argparse.SUPPRESS)
    bench.add_argument("--min-time", type=float, default=None, help=argparse.SUPPRESS)
    bench.add_argument("--no-peak", action="store_true", help=argparse.SUPPRESS)
    bench.add_argument("--sentences", type=_positive_int, default=None, help=argparse.SUPPRESS)
    bench.add_argument("--batch", type=_positive_int, default=64, help=argparse.SUPPRESS)
    golden = sub.add_parser(
        "golden", help="write or check the reproducible mode's golden results (SHA-256 per problem)",
        description="Golden results of the reproducible mode: --write computes them here, --check "
                    "recomputes them at every ISA level and thread count 1..cpus (onepath/golden.py).")
    mode = golden.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", help="compute the problems and write FILE")
    mode.add_argument("--check", metavar="FILE", help="recompute and compare with FILE")
    golden.add_argument("--levels", default=None, metavar="L1,L2",
                        help="with --check: only these levels (default: every level the host runs)")
    golden.add_argument("--threads", type=_sizes, default=None, metavar="T1,T2",
                        help="with --check: only these thread counts (default: 1..cpus)")

    tune = sub.add_parser(
        "tune", help="measure the cache blocking of every kernel on this host; write its tuning file",
        description="Measure candidate cache blockings (MC, KC, NC) for each registry row this host can "
                    "run, then the kernel choices (the conv rows' NCHW or NHWC formulation per problem "
                    "class, the 256-bit kernel at the AVX-512 levels, the thin float32 products' "
                    "options per SIMD level), keep the fastest and write them "
                    "to this host's tuning file "
                    "($XDG_CACHE_HOME/onepath/, or ONEPATH_TUNING=PATH), which dispatch loads at first "
                    "use (ONEPATH_TUNING=off ignores it).")
    tune.add_argument("--op", action="append", type=str.lower, choices=["matmul", "linear", "conv2d"], default=None,
                      help="tune only this op (repeatable; default all)")
    tune.add_argument("--dtype", action="append", type=str.lower, choices=["float32", "bfloat16"], default=None,
                      help="tune only this dtype (repeatable; default both)")
    tune.add_argument("--level", action="append", type=str.lower, default=None, metavar="LEVEL",
                      help="tune only the rows of this ISA level (repeatable; default every level "
                           "the host can run)")
    tune.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                      help="threads to tune for (default: onepath.get_num_threads())")
    tune.add_argument("--quick", action="store_true",
                      help="one problem per row, fewer candidates, one sweep (under 3 minutes on 2 cores)")
    tune.add_argument("--json", metavar="FILE", default=None,
                      help="also write every candidate tried, with its GFLOP/s, as JSON")
    tune.add_argument("--out", metavar="FILE", default=None,
                      help="write the tuning file here instead of the default location")
    tune.add_argument("--no-write", action="store_true", help="measure and print only")
    tune.add_argument("--no-choices", action="store_true",
                      help="the cache blocking only (no conv formulation / kernel level / thin option choices)")
    return parser


def _tune(args) -> int:
    from . import tune
    bad = _writable(args.json, "--json") or _writable(args.out, "--out")
    if bad:
        return _error(bad)
    try:
        tune.run(ops=args.op, dtypes=args.dtype, levels=args.level, threads=args.threads, quick=args.quick,
                 json_path=args.json, out_path=args.out, write=not args.no_write,
                 choices=not args.no_choices)
    except tune.TuneError as exc:
        return _error(str(exc))
    return 0


def _error(msg: str) -> int:
    print(f"onepath: error: {msg}", file=sys.stderr)
    return 2


def env_errors() -> dict[str, tuple[str, str]]:
    """The onepath variables set to an invalid value: {name: (value, one-line message naming the
    variable and its valid values)}; empty when all are valid or unset."""
    from . import _threads
    from .dispatch import cap
    errors = {}
    try:
        cap._read_env()
    except ValueError as exc:
        errors["ONEPATH_MAX_ISA"] = (os.environ["ONEPATH_MAX_ISA"], str(exc))
    value = os.environ.get("ONEPATH_NUM_THREADS", "").strip()
    if value:
        try:
            _threads.parse_env(value)
        except ValueError as exc:
            errors["ONEPATH_NUM_THREADS"] = (os.environ["ONEPATH_NUM_THREADS"], str(exc))
    from . import _repro_mode
    msg = _repro_mode.env_error()
    if msg:
        errors["ONEPATH_REPRODUCIBLE"] = (os.environ["ONEPATH_REPRODUCIBLE"], msg)
        _repro_mode._process = False  # the rest of a report as if it were unset
    return errors


def _report_env_errors(errors) -> None:
    for _, msg in errors.values():
        _error(msg)


def _writable(path: str | None, option: str) -> str | None:
    """The one-line error for an output file that cannot be written (checked before a long run, so
    its results are not lost at the end), or None."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK) or os.path.isdir(path):
        return f"{option} {path}: cannot write there (no such folder, a folder, or not writable)"
    return None


def _bench(args) -> int:
    import onepath
    from .bench.cli import BenchError
    bad = _writable(args.json, "--json")
    if bad:
        return _error(bad)
    if args.threads:  # more than the CPUs of the affinity mask: said once, capped (as the kernels are)
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                onepath.set_num_threads(args.threads)
            except ValueError as exc:
                return _error(f"--threads: {exc}")
        for w in caught:
            print(w.message, file=sys.stderr)
    threads = onepath.get_num_threads()
    from .bench.cli import steady_malloc
    steady_malloc()  # the same allocator state for onepath and its baselines (see its docstring)
    try:
        if args.list_suites:
            from .bench.core import discover
            for s in discover().values():
                print(f"{s.name:16s} {s.title}{'' if s.default else '  (not run by default)'}")
            return 0
        if args.dask:  # onepath/dask/fleet.py
            from .dask import fleet
            try:
                return fleet.main(args)
            except (OSError, ValueError, TypeError) as exc:  # no scheduler there, a bad address, ...
                return _error(f"--dask {args.dask}: {type(exc).__name__}: {exc}")
        if args.model == "minilm":
            from .bench import minilm
            try:
                sentences = None
                if args.sentences:
                    sentences = minilm.read_sentences()[: args.sentences]
                doc = minilm.bench(threads=threads, isa_level=args.isa, quick=args.quick,
                                   batch=args.batch, repeat=args.repeat, sentences=sentences,
                                   json_path=args.json)
            except minilm.ModelMissing as exc:
                print(f"onepath: {exc}", file=sys.stderr)
                return 1
            if args.save:
                import datetime as _dt

                from .bench.cli import save
                doc.setdefault("timestamp", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
                doc["options"]["model"] = "minilm"
                print(f"saved {save(doc)}", file=sys.stderr)
            return 0 if doc["ok"] else 1
        from .bench import cli
        if args.what == "conv" or args.desc:  # convolution suites (onepath/bench/conv_suite.py)
            from .bench import conv_suite
            from .bench.benchdnn import DescriptorError, load
            try:
                for item in args.desc or []:
                    load(item)
            except (DescriptorError, OSError) as exc:
                raise BenchError(f"--desc: {exc}") from None
            conv_suite.DESCRIPTORS, conv_suite.MB = args.desc, args.mb
            args.suite = args.suite or (["conv_desc"] if args.desc else ["conv", "conv_dw"])
        previous = onepath.is_reproducible()
        if args.reproducible:
            onepath.set_reproducible(True)
        try:
            doc = cli.run(threads=threads, isa_level=args.isa, quick=args.quick, suites=args.suite,
                          shapes=args.shapes, repeat=args.repeat, min_time=args.min_time,
                          json_path=args.json, peak=not args.no_peak, save_results=args.save)
        finally:
            onepath.set_reproducible(previous)
        return 0 if doc["ok"] else 1
    except BenchError as exc:
        return _error(str(exc))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["bench", "compare"]:  # its own parser (onepath/bench/compare.py)
        from .bench import compare
        return compare.main(argv[2:])
    args = build_parser().parse_args(argv)
    errors = env_errors()
    if args.command == "golden":
        if errors:
            _report_env_errors(errors)
            return 2
        from . import golden
        try:
            levels = [x.strip() for x in args.levels.split(",")] if args.levels else None
            if levels:
                from .dispatch.cap import _check
                levels = [_check(lv) for lv in levels]  # unknown or unrunnable levels: ValueError
        except ValueError as exc:
            return _error(f"--levels: {exc}")
        bad = _writable(args.write, "--write")
        if bad:
            return _error(bad)
        for t in args.threads or ():
            if not 1 <= t <= 1024:
                return _error(f"--threads: thread counts are integers from 1 to 1024, got {t}")
        return golden.main(args.write, args.check, levels, args.threads)
    if args.command == "info":
        from . import info
        _report_env_errors(errors)
        for name in errors:  # the rest of the report as if the invalid variable were unset
            del os.environ[name]
        rc = info.main(as_json=args.json, all_features=args.all,
                       with_py_cpuinfo=not args.no_py_cpuinfo, env_errors=errors)
        return 2 if errors else rc
    if errors:
        _report_env_errors(errors)
        return 2
    if args.command == "tune":
        return _tune(args)
    return _bench(args)


if __name__ == "__main__":
    sys.exit(main())
