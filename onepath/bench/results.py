"""Saved bench runs (``python -m onepath bench --save``) side by side, per host kind, as Markdown.

``python -m onepath.bench.results [RESULTS_DIR]`` prints, for the latest full default run of each
host kind under ``benchmarks/results/<vendor>-<uarch>[-<best level>]/`` (``cli.host_kind``; a quick
run when a host has no full one), the geometric means per group and every row, with onepath's
GFLOP/s and the ratio to each baseline (baseline time / onepath time), one column group per host
kind. ``--readme README.md`` writes it
between the README's ``bench-results`` markers.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

# Host kinds the project runs on, shown even before a run of theirs is saved.
HOST_KINDS = {"amd-zen4": "AMD EPYC Zen 4",
              "intel-sapphirerapids": "Intel Xeon AMX (Sapphire Rapids class)",
              "amd-zen3": "AMD EPYC Zen 3 (AVX2 only)"}


def latest(host_dir: Path) -> tuple[Path, dict] | None:
    """The newest full default run in ``host_dir`` (file names start with a UTC time stamp), else
    the newest quick one, else None."""
    files = sorted(host_dir.glob("*.json"))
    for kind in ("-full-", "-quick-"):
        picked = [f for f in files if kind in f.name and "-avx" not in f.name and "-generic" not in f.name]
        if picked:
            return picked[-1], json.loads(picked[-1].read_text())
    return None


def _blocking(t: dict | None) -> str:
    if not t or not t.get("rows"):
        return "shipped rows / cache model (no tuning file)"
    return f"tuning file ({t['rows']} rows)"


def _ratio_cell(r: dict) -> str:
    return " ".join(f"{v:.2f}x {b}" for b, v in r.get("ratios", {}).items() if v) or "-"


def markdown(results_dir: Path) -> str:
    """The side-by-side Markdown of the latest run of every host kind (see the module docstring)."""
    hosts = dict(HOST_KINDS)
    for d in sorted(p for p in results_dir.glob("*") if p.is_dir()):
        base, _, level = d.name.rpartition("-")  # a host hiding levels of its uarch (cli.host_kind)
        hosts.setdefault(d.name, f"{HOST_KINDS[base]}, {level} only" if base in HOST_KINDS else d.name)
    runs = {h: latest(results_dir / h) for h in hosts}
    lines = []
    for h, title in hosts.items():
        run = runs[h]
        if run is None:
            lines.append(f"- **{title}** (`{h}`): none measured yet.")
            continue
        path, doc = run
        fp, opt = doc["fingerprint"], doc["options"]
        lines.append(f"- **{title}** (`{h}`): `{path.relative_to(results_dir.parent.parent)}`, "
                     f"{fp.get('brand')}, family {fp.get('family')} model {fp.get('model')}, "
                     f"{opt['threads']} threads, level {fp.get('level')}, "
                     f"{'quick' if opt.get('quick') else 'full'} run of {doc['timestamp']}, "
                     f"blocking: {_blocking(fp.get('tuning'))}.")
    if not any(runs.values()):
        return "\n".join(lines)
    measured = list(hosts)  # a column per host kind ("-" where none is measured yet)
    heads = [hosts[h] + ("" if runs[h] else " (none yet)") for h in measured]
    # geometric means per (suite, group)
    lines += ["", "Geometric mean of the ratios per group (baseline time / onepath time; > 1: onepath is faster):",
              "", "| suite | group | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    keys = []
    for h in (h for h in measured if runs[h]):
        for suite, groups in runs[h][1].get("geomeans", {}).items():
            for g in groups:
                if (suite, g["group"]) not in keys:
                    keys.append((suite, g["group"]))
    for suite, group in keys:
        cells = []
        for h in measured:
            g = next((g for g in runs[h][1].get("geomeans", {}).get(suite, []) if g["group"] == group),
                     None) if runs[h] else None
            cells.append(" ".join(f"{v:.2f}x {b}" for b, v in g["geomean"].items()) if g else "-")
        lines.append(f"| {suite} | {group} | " + " | ".join(cells) + " |")
    # every row
    lines += ["", "<details><summary>Every row (onepath GFLOP/s, ratio to each baseline)</summary>", "",
              "| suite | group | shape | " + " | ".join(heads) + " |", "|---|---|---|" + "---|" * len(heads)]
    rows, index = [], {}
    for h in (h for h in measured if runs[h]):
        for r in runs[h][1]["results"]:
            k = (r["suite"], r["group"], r["name"])
            if k not in index:
                index[k] = {}
                rows.append(k)
            index[k][h] = r
    for k in rows:
        cells = []
        for h in measured:
            r = index[k].get(h)
            g = r["impls"]["onepath"]["gflops"] if r else None
            cells.append(f"{g:.1f} GFLOP/s, {_ratio_cell(r)}" if r and g else "-")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(cells) + " |")
    lines += ["", "</details>"]
    return "\n".join(lines)


START, END = "<!-- bench-results:start -->", "<!-- bench-results:end -->"


def update_readme(readme: Path, results_dir: Path) -> None:
    """Replace the text between the bench-results markers of ``readme`` with ``markdown()``."""
    text = readme.read_text(encoding="utf-8")
    i, j = text.index(START) + len(START), text.index(END)
    readme.write_text(text[:i] + "\n" + markdown(results_dir) + "\n" + text[j:], encoding="utf-8")


def main(argv=None) -> int:
    """``python -m onepath.bench.results [RESULTS_DIR] [--readme README.md]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    readme = None
    if "--readme" in argv:
        k = argv.index("--readme")
        readme = Path(argv[k + 1])
        del argv[k:k + 2]
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    if readme is not None:
        update_readme(readme, root)
    else:
        print(markdown(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
