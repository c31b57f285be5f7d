"""``python -m onepath bench compare RUN.json [RUN.json ...]``: bench runs side by side, and regressions.

Input: files written by ``python -m onepath bench --json FILE`` (one or more runners, e.g. the
artifacts of a CI matrix). Output: per suite, one table whose rows are the bench rows and whose
column groups are the runs (GFLOP/s, % of that runner's FMA peak, ratio to its first baseline),
each run named by its fingerprint (vendor, uarch, level, threads).

Judging: runs with the same fingerprint (same CPU model and stepping, level, threads, mode) are
compared as before/after: the first run of a fingerprint is the reference, every later one is judged
row by row. A row regresses when the later run's time samples are larger with a one-sided
Mann-Whitney U test p < ``--alpha`` (default 0.01) AND its median time is at least ``--min-effect``
(default 10 %) larger: a significance test plus a minimum effect, the rule asv (``asv compare``) and
Google Benchmark (``compare.py`` U test) apply. Runs of different fingerprints are compared, never
judged. The U test needs scipy (``scipy.stats.mannwhitneyu``) and the raw samples the bench JSON
stores per row (``impls.onepath.samples``); without them a row is shown but not judged.
``--fail-on-regression`` exits 1 when a row regresses; ``--plot FILE.png`` draws the GFLOP/s with
matplotlib (the ``plot`` extra): one panel per suite, one bar group per runner.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

FP_KEYS = ("vendor", "brand", "family", "model", "stepping", "uarch", "level", "threads", "reproducible")


class CompareError(Exception):
    """A file that is not a bench JSON, or bad arguments."""


def load(path: str) -> dict:
    """Read one ``bench --json`` file; raises CompareError when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or "fingerprint" not in doc or not isinstance(doc.get("results"), list):
        raise CompareError(f"{path}: not a `python -m onepath bench --json` file (no fingerprint/results)")
    doc["_path"] = path
    return doc


def fp_key(doc: dict) -> tuple:
    fp = doc["fingerprint"]
    return tuple(fp.get(k) for k in FP_KEYS)


def runner_names(docs: list[dict]) -> list[str]:
    """'vendor uarch level Nt' per run, with '#2', '#3' for repeated fingerprints."""
    names, seen = [], {}
    for d in docs:
        fp = d["fingerprint"]
        base = (f"{fp.get('vendor', '?')} {fp.get('uarch', '?')} {fp.get('level', '?')} {fp.get('threads', '?')}t"
                + (" repro" if fp.get("reproducible") else ""))
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return names


def _rows(doc: dict) -> dict:
    return {(r.get("suite"), r.get("group", ""), r.get("name")): r for r in doc["results"]}


def judge(old: dict, new: dict, alpha: float = 0.01, min_effect: float = 0.10) -> dict:
    """Judge one row of a later run (``new``) against the same row of the reference run (``old``).

    Returns {"verdict": "regression" | "improvement" | "same" | "not judged", "change": median time
    ratio - 1 (+0.3: 30 % slower), "p": the one-sided U test's p-value or None, "why": text}.
    """
    so = (old.get("impls", {}).get("onepath") or {}).get("samples")
    sn = (new.get("impls", {}).get("onepath") or {}).get("samples")
    if not so or not sn or len(so) < 3 or len(sn) < 3:
        return {"verdict": "not judged", "change": None, "p": None, "why": "no raw samples (need >= 3 per run)"}
    change = statistics.median(sn) / statistics.median(so) - 1.0
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        return {"verdict": "not judged", "change": change, "p": None, "why": "scipy is not installed"}
    p_slower = float(mannwhitneyu(sn, so, alternative="greater").pvalue)
    p_faster = float(mannwhitneyu(sn, so, alternative="less").pvalue)
    if p_slower < alpha and change >= min_effect:
        return {"verdict": "regression", "change": change, "p": p_slower, "why": ""}
    if p_faster < alpha and -change >= min_effect / (1 + min_effect):
        return {"verdict": "improvement", "change": change, "p": p_faster, "why": ""}
    return {"verdict": "same", "change": change, "p": min(p_slower, p_faster), "why": ""}


def compare(docs: list[dict], alpha: float = 0.01, min_effect: float = 0.10) -> dict:
    """The comparison as data: runners, per-suite rows with each run's numbers, and the judgements.

    Returns {"runners": [...], "suites": {suite: [{"group", "name", "runs": [cell or None],
    "judged": [judgement or None]}]}, "regressions": [(suite, group, name, runner)]}; a cell is
    {"gflops", "pct_peak", "ratio", "baseline"}.
    """
    names = runner_names(docs)
    keys = [fp_key(d) for d in docs]
    ref_of = []
    for i, k in enumerate(keys):
        ref_of.append(next((j for j in range(i) if keys[j] == k), None))
    tables = [_rows(d) for d in docs]
    order = list(dict.fromkeys(k for t in tables for k in t))
    suites: dict = {}
    regressions = []
    for key in order:
        suite, group, name = key
        cells, judged = [], []
        for i, t in enumerate(tables):
            r = t.get(key)
            if r is None:
                cells.append(None)
                judged.append(None)
                continue
            ratios = r.get("ratios") or {}
            base = next(iter(ratios), None)
            one = (r.get("impls") or {}).get("onepath") or {}
            cells.append({"gflops": one.get("gflops"), "pct_peak": r.get("pct_peak"),
                          "ratio": ratios.get(base) if base else None, "baseline": base})
            j = ref_of[i]
            if j is not None and key in tables[j]:
                v = judge(tables[j][key], r, alpha, min_effect)
                judged.append(v)
                if v["verdict"] == "regression":
                    regressions.append((suite, group, name, names[i]))
            else:
                judged.append(None)
        suites.setdefault(suite, []).append({"group": group, "name": name, "runs": cells, "judged": judged})
    return {"runners": names, "reference": [None if j is None else names[j] for j in ref_of],
            "suites": suites, "regressions": regressions}


def _f(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def render(result: dict, out=None) -> None:
    """Print one table per suite (plain text, or rich on a terminal: bench's ``print_table``)."""
    from .cli import print_table
    out = out or sys.stdout
    names = result["runners"]
    for i, ref in enumerate(result["reference"]):
        if ref is not None:
            print(f"{names[i]}: judged against {ref} (same fingerprint)", file=out)
    for suite, rows in result["suites"].items():
        headers = ["group", "row"]
        judged_cols = [i for i in range(len(names)) if result["reference"][i] is not None]
        for i, n in enumerate(names):
            headers += [f"{n} GFLOP/s", "% peak", "x base"]
            if i in judged_cols:
                headers.append("vs ref")
        cells = []
        for r in rows:
            line = [r["group"] or "-", r["name"]]
            for i, c in enumerate(r["runs"]):
                line += ["-", "-", "-"] if c is None else [_f(c["gflops"]), _f(c["pct_peak"], ".0f"),
                                                           _f(c["ratio"], ".2f")]
                if i in judged_cols:
                    v = r["judged"][i]
                    if v is None:
                        line.append("-")
                    elif v["verdict"] == "not judged":
                        line.append("n/j")
                    else:
                        tag = {"regression": " REGRESSION", "improvement": " faster", "same": ""}[v["verdict"]]
                        line.append(f"{100 * v['change']:+.0f}% p={v['p']:.3f}{tag}")
            cells.append(line)
        print_table(f"suite {suite}", headers, cells, file=out)
        print(file=out)
    print("x base = the run's first baseline time / onepath time; vs ref = onepath's median time change "
          "against the first run of the same fingerprint, one-sided Mann-Whitney U p-value", file=out)
    if result["regressions"]:
        print(f"{len(result['regressions'])} regression(s): " + ", ".join(
            f"{s}/{n} on {who}" for s, g, n, who in result["regressions"]), file=out)


def plot(result: dict, path: str) -> None:
    """Bar chart of onepath GFLOP/s: one panel per suite, one bar group per runner (a bar per row).
    Raises CompareError when matplotlib is missing (``pip install "onepath[plot]"``)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CompareError("--plot needs matplotlib: pip install \"onepath[plot]\"") from None
    suites = result["suites"]
    names = result["runners"]
    fig, axes = plt.subplots(len(suites), 1, figsize=(max(6, 2.5 * len(names) + 3), 3.6 * len(suites)),
                             squeeze=False)
    for ax, (suite, rows) in zip(axes[:, 0], suites.items()):
        nrows = len(rows)
        width = 0.8 / max(nrows, 1)
        for k, r in enumerate(rows):
            xs = [i - 0.4 + width * (k + 0.5) for i in range(len(names))]
            ys = [(c["gflops"] or 0.0) if c else 0.0 for c in r["runs"]]
            ax.bar(xs, ys, width, label=f"{r['group']} {r['name']}".strip())
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_ylabel("onepath GFLOP/s")
        ax.set_title(f"suite {suite}")
        if nrows <= 20:
            ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="onepath bench compare",
                                description="Put bench --json runs side by side; judge runs of the same "
                                            "fingerprint for regressions (Mann-Whitney U + minimum effect).")
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="files written by `onepath bench --json`")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="also draw the GFLOP/s (needs matplotlib)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a row regresses (2 when no row could be judged)")
    p.add_argument("--alpha", type=float, default=0.01, help="U test significance (default 0.01)")
    p.add_argument("--min-effect", type=float, default=0.10,
                   help="minimum median slowdown to call a regression (default 0.10 = 10%%)")
    return p


def main(argv=None) -> int:
    """Entry point of ``python -m onepath bench compare``; 0 ok, 1 regression (with
    --fail-on-regression), 2 bad input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0.0 < args.alpha < 1.0:
        parser.error(f"--alpha must be between 0 and 1 (exclusive), got {args.alpha}")
    if not args.min_effect >= 0.0:
        parser.error(f"--min-effect must be >= 0, got {args.min_effect}")
    try:
        docs = [load(p) for p in args.runs]
        result = compare(docs, args.alpha, args.min_effect)
        render(result)
        verdicts = [v for rows in result["suites"].values() for r in rows for v in r["judged"] if v]
        why = sorted({v["why"] for v in verdicts if v["verdict"] == "not judged" and v["why"]})
        if why:
            print(f"n/j (not judged): {'; '.join(why)}"
                  + (" (pip install scipy)" if "scipy is not installed" in why else ""), file=sys.stderr)
        if args.fail_on_regression and verdicts and all(v["verdict"] == "not judged" for v in verdicts):
            raise CompareError("--fail-on-regression: no row could be judged (" + "; ".join(why) + ")")
        if args.plot:
            plot(result, args.plot)
            print(f"wrote {args.plot}", file=sys.stderr)
    except CompareError as exc:
        print(f"onepath: error: {exc}", file=sys.stderr)
        return 2
    return 1 if (args.fail_on_regression and result["regressions"]) else 0
