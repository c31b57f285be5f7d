"""``python -m onepath info``: what the probe sees, which level is in force and why, and which kernel
each (op, dtype) selects, beside what py-cpuinfo reports (imported here only: it is slow)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap

ENV_VARS = ("ONEPATH_MAX_ISA", "ONEPATH_NUM_THREADS", "ONEPATH_VERBOSE", "ONEPATH_REPRODUCIBLE", "ONEPATH_TUNING",
            "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")


def _size(n) -> str:
    if not isinstance(n, int) or n <= 0:
        return "none" if n == 0 else "?"
    if n < 1 << 20:
        return f"{n // 1024} KiB"
    return f"{n / (1 << 20):g} MiB"


def _used_by() -> dict[str, str]:
    """feature -> the lowest ISA level that requires it (the features onepath uses)."""
    from .dispatch.levels import LEVELS, REQUIREMENTS
    out: dict[str, str] = {}
    for level in LEVELS:
        for feat in REQUIREMENTS[level].features:
            out.setdefault(feat, level)
    return out


def feature_rows(cpu) -> list[dict]:
    """One row per decoded feature: cpu_has, os_enabled, used_by (level name or None)."""
    used = _used_by()
    table = cpu.feature_table() if hasattr(cpu, "feature_table") else [
        (f, f in cpu.features, True) for f in sorted(set(cpu.features) | set(used))]
    seen = set()
    rows = []
    for name, has, os_on in table:
        seen.add(name)
        rows.append({"feature": name, "cpu_has": bool(has), "os_enabled": bool(os_on),
                     "used_by": used.get(name)})
    for name, level in used.items():  # a required feature the decoder does not list (should not happen)
        if name not in seen:
            rows.append({"feature": name, "cpu_has": name in cpu.features, "os_enabled": None,
                         "used_by": level})
    return rows


def kernel_rows() -> list[dict]:
    """For each (op, dtype) in the registry: the kernel ``select`` picks under the cap in force;
    then, for each other algorithm of that (op, dtype) (e.g. conv2d's depthwise path, chosen per
    problem), the row it would use at that level (``"selected": False``). ``blocking_from`` says
    where MC/KC/NC came from: "tuning file", "shipped" (registry.TUNING) or "cache model";
    ``kernel_from`` "tuning file" when a tuning file's kernel_level choice picked a lower level's
    kernel (empty otherwise)."""
    import onepath
    from .dispatch import REGISTRY, rows, select
    from .dispatch.registry import tuned_kernel, with_blocking
    from .dispatch.levels import level_index
    cap_i = level_index(onepath.isa())
    out = []
    for op, dtype in dict.fromkeys((r.op, r.dtype) for r in REGISTRY):
        try:
            k = select(op, dtype)
        except Exception as exc:  # noqa: BLE001 - report, do not crash the report
            out.append({"op": op, "dtype": dtype, "error": str(exc)})
            continue
        algo = getattr(k, "algorithm", None)
        out.append({"op": op, "dtype": dtype, "algorithm": algo, "selected": True, "name": k.name,
                    "level": k.level, "symbol": k.symbol, "mr": k.mr, "nr": k.nr, "mc": k.mc,
                    "kc": k.kc, "nc": k.nc, "tuned_for": k.uarch, "blocking_from": k.blocking_from,
                    "kernel_from": k.kernel_from})
        seen = {algo}
        for r in rows(op, dtype):
            a = getattr(r, "algorithm", None)
            if a in seen or level_index(r.level) > cap_i:
                continue
            seen.add(a)
            r = with_blocking(tuned_kernel(r))
            out.append({"op": op, "dtype": dtype, "algorithm": a, "selected": False, "name": r.name,
                        "level": r.level, "symbol": r.symbol, "mr": r.mr, "nr": r.nr,
                        "mc": r.mc or None, "kc": r.kc or None, "nc": r.nc or None,
                        "tuned_for": r.uarch, "blocking_from": r.blocking_from,
                        "kernel_from": r.kernel_from})
    return out


# Ops outside the registry: one kernel per ISA level (the level in force), no blocking or tuning.
OTHER_OPS = (("attention", "float32, bfloat16", "kernels/attn.c"), ("layer_norm", "float32, bfloat16", "kernels/norm.c"))


def other_op_rows() -> list[dict]:
    """The ops that run the level in force's module directly (``OTHER_OPS``), not a registry row:
    [{"op", "dtypes", "source", "level"}]."""
    import onepath
    level = onepath.isa()
    return [{"op": op, "dtypes": dt, "source": src, "level": level} for op, dt, src in OTHER_OPS]


def choice_rows() -> list[dict]:
    """The kernel choices in force beside the blocking: for each (level, dtype) of the conv rows
    at or below the level in force, the NCHW-as-NHWC limits (largest output plane OH*OW per problem
    class, ``registry.CONV_NCHW_AS_NHWC``) and where they came from ("tuning file", "shipped",
    "none"); and each ``kernel_level`` and ``thin_f32`` choice of the tuning file in force (the
    latter replaces that level's ``GEMV_F32_OPTIONS`` variant row)."""
    import onepath
    from .dispatch import registry, tuning
    from .dispatch.levels import level_index
    cap_i = level_index(onepath.isa())
    out = []
    # the tunable classes, then any a shipped row adds (e.g. "kxk_batch")
    classes = (*tuning.CONV_CLASSES, *sorted({c for lim in registry.CONV_NCHW_AS_NHWC.values() for c in lim}
                                             - set(tuning.CONV_CLASSES)))
    for level, dtype in dict.fromkeys((r.level, r.dtype) for r in registry.rows("conv2d")
                                      if r.algorithm == "implicit_gemm"):
        if level_index(level) > cap_i or level not in onepath.available_isas():
            continue
        lim, src = registry.conv_as_nhwc_limits(level, dtype)
        out.append({"choice": "conv_as_nhwc", "op": "conv2d", "dtype": dtype, "level": level,
                    "value": {c: int(lim.get(c, 0)) for c in classes}, "from": src})
    for (level, op, dtype), ch in sorted(tuning.choices().items()):
        for kind in ("kernel_level", "thin_f32"):
            if kind in ch:
                value = ch[kind] if kind == "kernel_level" else "+".join(ch[kind]) or "none"
                out.append({"choice": kind, "op": op, "dtype": dtype, "level": level,
                            "value": value, "from": "tuning file"})
    return out


def variant_rows() -> list[dict]:
    """The per-microarchitecture kernel variants this host runs (shipped registry rules keyed by
    uarch and level; Intel and unmeasured hosts have none): each {"rule", "level", "value"}, the
    rule being ``registry.BF16_VARIANTS`` (bfloat16 decode / A in place / C written from the
    registers / thin_nc / next_panel_l2), ``GEMV_F32_OPTIONS`` (thin float32 products),
    ``CONV_F32_OPTIONS`` (float32 k x k convolutions), ``CONV_BF16_OPTIONS`` (bfloat16 k x k
    convolutions), ``CONV_STEM_OPTIONS`` (the direct few-channel convolution) or ``DW_ROW_KERNELS``
    (depthwise 3x3 row kernels: smallest (``_narrow``: largest) input width per stride and input
    dtype; ``s1_float32_max_batch``: the largest batch the float32 stride-1 rows run at).
    """
    import onepath
    from .dispatch import registry
    uarch = registry._probe().uarch
    out = []
    for level in onepath.available_isas():
        for rule, value in (("BF16_VARIANTS", sorted(registry.bf16_variants(level))),
                            ("GEMV_F32_OPTIONS", list(registry.GEMV_F32_OPTIONS.get((uarch, level), ()))),
                            ("CONV_F32_OPTIONS", list(registry.CONV_F32_OPTIONS.get((uarch, level), ()))),
                            ("CONV_BF16_OPTIONS", list(registry.CONV_BF16_OPTIONS.get((uarch, level), ()))),
                            ("CONV_STEM_OPTIONS", list(registry.CONV_STEM_OPTIONS.get((uarch, level), ()))),
                            ("DW_ROW_KERNELS", registry.DW_ROW_KERNELS.get((uarch, level), {}))):
            if value:
                out.append({"rule": rule, "level": level, "value": value})
    return out


def tuning_state() -> dict:
    """The tuning file in force: mode (default / explicit ONEPATH_TUNING / off), path, status, rows."""
    from .dispatch import tuning
    return tuning.state().as_dict()


def builds() -> dict[str, bool]:
    """Which compiled kernel modules exist in the install (found, not imported)."""
    from .kernels import BUILDS
    return {b: importlib.util.find_spec(f"onepath.kernels._op_{b}") is not None for b in BUILDS}


def py_cpuinfo(cpu) -> dict:
    """What py-cpuinfo reports, beside our probe (brand, flags, and differences on the features
    onepath uses)."""
    try:
        import cpuinfo
    except ImportError:
        return {"available": False, "error": "py-cpuinfo is not installed; for this comparison: "
                                              "pip install 'onepath[info]' (py-cpuinfo2, or py-cpuinfo: "
                                              "either provides the cpuinfo module)"}
    try:
        info = cpuinfo.get_cpu_info()
    except Exception as exc:  # noqa: BLE001
        return {"available": False, "error": f"py-cpuinfo failed: {exc}"}
    flags = set(info.get("flags", []))
    used = set(_used_by())
    ours = set(cpu.features)
    norm = {f.replace(".", "_") for f in flags}
    return {
        "available": True,
        "version": ".".join(map(str, getattr(cpuinfo, "CPUINFO_VERSION", ()))) or None,
        "brand": info.get("brand_raw"), "vendor": info.get("vendor_id_raw"),
        "family": info.get("family"), "model": info.get("model"), "stepping": info.get("stepping"),
        "arch": info.get("arch"), "hz_advertised": info.get("hz_advertised_friendly"),
        "l2_cache_size": info.get("l2_cache_size"), "l3_cache_size": info.get("l3_cache_size"),
        "flags_count": len(flags), "ours_count": len(ours),
        "brand_matches": (info.get("brand_raw") or "").strip() == cpu.brand,
        # features onepath's levels require on which the two disagree
        "only_ours": sorted((ours & used) - norm),
        "only_py_cpuinfo": sorted((norm & used) - ours),
    }


def _repro_info() -> dict:
    """The reproducible mode in force (onepath.reproducible()) and the kernel it would run."""
    from . import _repro_mode
    try:
        from .ops._repro import kernel_name
        kernel = kernel_name()
    except Exception as exc:  # noqa: BLE001 - a missing build shows as such, info still prints
        kernel = f"unavailable ({type(exc).__name__})"
    return {"on": _repro_mode.on(), "source": _repro_mode.reason(), "kernel": kernel}


def collect(with_py_cpuinfo: bool = True, env_errors: dict | None = None) -> dict:
    """The whole report as one JSON-ready dict. ``env_errors``: {variable: (value, message)} for
    onepath variables that were set to invalid values (and removed from the environment, so the
    report shows what runs without them)."""
    import numpy as np

    import onepath
    from .dispatch import LEVELS, cap_reason, probe
    from .dispatch.uarch import hidden_levels
    cpu = probe()
    report = {
        "onepath_version": getattr(onepath, "__version__", None),
        "python": sys.version.split()[0], "numpy": np.__version__,
        "vendor": cpu.vendor, "brand": cpu.brand, "uarch": cpu.uarch,
        "family": cpu.family, "model": cpu.model, "stepping": cpu.stepping,
        "num_cpus": cpu.num_cpus, "caches": dict(cpu.caches),
        "caches_source": getattr(cpu, "caches_source", None),
        "xcr0": f"{cpu.xcr0:#x}", "os_states": getattr(cpu, "os_states", None),
        "amx_permission": cpu.amx_permission,
        "levels": list(LEVELS), "available_isas": list(onepath.available_isas()),
        "isa": onepath.isa(), "cap_reason": cap_reason(),
        "host_best": cpu.isa,
        "hidden_levels": list(hidden_levels(cpu.uarch, cpu.isa)),
        "limits": cpu.limits() if hasattr(cpu, "limits") else {},
        "threads": onepath.get_num_threads(),
        "reproducible": _repro_info(),
        "features": feature_rows(cpu),
        "kernels": kernel_rows(),
        "other_ops": other_op_rows(),
        "choices": choice_rows(),
        "variants": variant_rows(),
        "tuning": tuning_state(),
        "builds": builds(),
        "env": {k: os.environ[k] for k in ENV_VARS if k in os.environ},
    }
    for name, (value, msg) in (env_errors or {}).items():
        report["env"][name] = value
        report.setdefault("env_errors", {})[name] = msg
    dask_worker = sys.modules.get("onepath.dask._worker")  # inside a Dask worker with OnepathWorker
    if dask_worker is not None and dask_worker.policy() is not None:
        report["dask_worker"] = dask_worker.policy()
    if with_py_cpuinfo:
        report["py_cpuinfo"] = py_cpuinfo(cpu)
    return report


def _yn(v) -> str:
    return "?" if v is None else ("yes" if v else "no")


def _table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    fmt = lambda r: indent + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return [fmt(headers), indent + "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def render(report: dict, all_features: bool = False) -> str:
    """Plain-text rendering of ``collect()``."""
    r = report
    c = r["caches"]
    lines = [
        f"onepath {r['onepath_version']}  (python {r['python']}, numpy {r['numpy']})",
        "",
        "CPU",
        f"  vendor          {r['vendor']}",
        f"  brand           {r['brand'] or '?'}",
        f"  uarch           {r['uarch']}",
        f"  family/model    {r['family']} / {r['model']} (0x{r['family']:x} / 0x{r['model']:02x}), "
        f"stepping {r['stepping']}",
        f"  cpus            {r['num_cpus']} (this process may use)",
        f"  caches          L1d {_size(c.get('l1d'))}, L2 {_size(c.get('l2'))}, L3 {_size(c.get('l3'))}"
        + (f"  (from {r['caches_source']})" if r.get("caches_source") else ""),
        f"  xcr0            {r['xcr0']}"
        + (f"  (OS enabled: {', '.join(g for g, on in r['os_states'].items() if on) or 'none'})"
           if r.get("os_states") else ""),
        f"  amx permission  {_yn(r['amx_permission'])}",
        "",
        "ISA level",
        f"  in force          {r['isa']}  ({r['cap_reason']})",
        f"  host can run      {', '.join(r['available_isas'])}",
    ]
    if r.get("hidden_levels"):
        lines.append(f"  note              {r['uarch']} CPUs offer {', '.join(r['hidden_levels'])}: this host's "
                     f"CPUID / XCR0 hide {'them' if len(r['hidden_levels']) > 1 else 'it'} (a virtual machine's "
                     "CPU model?), so it runs at most "
                     f"{r['available_isas'][-1]}")
    for level in r["levels"]:
        if level not in r["available_isas"]:
            why = r["limits"].get(level, "not available on this host")
            lines.append(f"  {level:<18}unavailable: {why.split(': ', 1)[-1] if why.startswith(level) else why}")
        elif r["levels"].index(level) > r["levels"].index(r["isa"]):
            lines.append(f"  {level:<18}available, but above the cap")
    lines.append(f"  threads           {r['threads']}")
    rp = r.get("reproducible")
    if rp:
        lines.append(f"  reproducible mode {'on' if rp['on'] else 'off'}  ({rp['source']}; kernel {rp['kernel']})")
    if r.get("dask_worker"):
        p = r["dask_worker"]
        lines.append(f"  dask worker       {p['worker_threads']} worker threads x {p['onepath_threads']} onepath "
                     f"threads <= {p['cores']} cores ({p['source']})")
    lines += ["", "Kernels (op, dtype -> the kernel selected at the level in force; '+' rows: "
                  "other algorithms, picked per problem)"]
    krows = []
    for k in r["kernels"]:
        if "error" in k:
            krows.append([k["op"], k["dtype"], "-", "-", "-", "-", "-", "-", k["error"]])
            continue
        blk = [str(k[x]) if k[x] else "auto" for x in ("mc", "kc", "nc")]
        src = k.get("blocking_from") or "-"
        if k.get("tuned_for") and src == "shipped":
            src += f" ({k['tuned_for']})"
        level = k["level"] + (" (tuning file)" if k.get("kernel_from") else "")
        krows.append([("" if k["selected"] else "+ ") + k["op"], k["dtype"], k.get("algorithm") or "-",
                      k["name"], level, f"{k['mr']}x{k['nr']}", *blk, src])
    lines += _table(["op", "dtype", "algorithm", "kernel", "level", "MRxNR", "MC", "KC", "NC",
                     "MC/KC/NC from"], krows)
    if r.get("other_ops"):
        lines += ["", "Other ops (no registry row: the level in force's kernel, no blocking)"]
        lines += _table(["op", "dtypes", "level", "source"],
                        [[o["op"], o["dtypes"], o["level"], o["source"]] for o in r["other_ops"]])
    conv = [c for c in r.get("choices", []) if c["choice"] == "conv_as_nhwc"]
    if conv:
        lines += ["", "NCHW convolutions in the NHWC formulation (largest output plane OH*OW per "
                      "problem class; 0: never)"]
        classes = list(conv[0]["value"])
        lines += _table(["conv rows", "dtype", *classes, "from"],
                        [[c["level"], c["dtype"], *(str(c["value"][x]) for x in classes), c["from"]]
                         for c in conv])
    kl = [c for c in r.get("choices", []) if c["choice"] == "kernel_level"]
    if kl:
        lines += ["", "Kernel level choices (the level whose kernel runs where dispatch picks the row's level)"]
        lines += _table(["op", "dtype", "row level", "runs", "from"],
                        [[c["op"], c["dtype"], c["level"], c["value"] + ("" if c["value"] != c["level"]
                                                                        else " (its own)"), c["from"]]
                         for c in kl])
    thin = [c for c in r.get("choices", []) if c["choice"] == "thin_f32"]
    if thin:
        lines += ["", "Thin float32 product options (M <= 16; of each level's kernel module, where a kernel "
                      "level choice may send the GEMM; they replace the level's GEMV_F32_OPTIONS row)"]
        lines += _table(["level", "options", "from"], [[c["level"], c["value"], c["from"]] for c in thin])
    t = r.get("tuning")
    if t:
        lines.append(f"  tuning file: {t['path'] or '-'} ({t['status']})")
    missing = [b for b, ok in r["builds"].items() if not ok]
    if missing:
        lines.append(f"  (kernel modules not built: {', '.join(missing)})")
    var = r.get("variants")
    if var:
        lines += ["", "Kernel variants for this microarchitecture (registry rules, measured on it)"]
        lines += _table(["rule", "level", "variants"],
                        [[v["rule"], v["level"], ", ".join(f"{k} >= {x}" for k, x in v["value"].items())
                          if isinstance(v["value"], dict) else ", ".join(v["value"])] for v in var])

    feats = r["features"]
    lines += ["", "Features onepath uses (CPU has it / OS enabled its register state / level requiring it)"]
    used = sorted((f for f in feats if f["used_by"]), key=lambda f: r["levels"].index(f["used_by"]))
    lines += _table(["feature", "cpu", "os", "required by"],
                    [[f["feature"], _yn(f["cpu_has"]), _yn(f["os_enabled"]), f["used_by"]] for f in used])
    others = [f for f in feats if not f["used_by"]]
    if all_features:
        lines += ["", "Other decoded features"]
        lines += _table(["feature", "cpu", "os"],
                        [[f["feature"], _yn(f["cpu_has"]), _yn(f["os_enabled"])] for f in others])
    else:
        has = [f["feature"] for f in others if f["cpu_has"]]
        off = [f["feature"] for f in others if f["cpu_has"] and f["os_enabled"] is False]
        lines += ["", f"Other features the CPU has ({len(has)}; --all for the full table)"]
        lines += textwrap.wrap(" ".join(has), width=96, initial_indent="  ", subsequent_indent="  ")
        if off:
            lines.append(f"  ...of which the OS has not enabled the register state: {' '.join(off)}")

    pc = r.get("py_cpuinfo")
    if pc is not None:
        lines += ["", "py-cpuinfo (for comparison)"]
        if not pc.get("available"):
            lines.append(f"  {pc.get('error')}")
        else:
            lines.append(f"  brand           {pc['brand']}"
                         + ("  (same as ours)" if pc["brand_matches"] else f"  (ours: {r['brand']})"))
            lines.append(f"  family/model    {pc['family']} / {pc['model']}, stepping {pc['stepping']}")
            lines.append(f"  flags           {pc['flags_count']} reported (our probe decodes "
                         f"{pc['ours_count']} set features)")
            if pc["only_ours"] or pc["only_py_cpuinfo"]:
                lines.append(f"  disagreement on onepath features: only ours {pc['only_ours']}, "
                             f"only py-cpuinfo {pc['only_py_cpuinfo']}")
            else:
                lines.append("  agrees on every feature onepath's levels require")
    if r["env"]:
        bad = r.get("env_errors", {})
        lines += ["", "Environment"] + [f"  {k}={v}" + ("  (invalid: ignored in this report)" if k in bad else "")
                                        for k, v in r["env"].items()]
    return "\n".join(lines)


def main(as_json: bool = False, all_features: bool = False, with_py_cpuinfo: bool = True,
         env_errors: dict | None = None) -> int:
    report = collect(with_py_cpuinfo=with_py_cpuinfo, env_errors=env_errors)
    if as_json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render(report, all_features=all_features))
    return 0
