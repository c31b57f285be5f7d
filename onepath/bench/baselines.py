"""The bench's optional baselines: torch when installed (never a dependency of onepath), and the note
the bench prints when a suite's baseline is missing, saying how to get it."""
from __future__ import annotations

# The torch release the bench's numbers and the README refer to (CPU build).
INSTALL = {"torch": "pip install torch==2.13.0"}


def torch_or_none():
    """The torch module, or None when it is not importable."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - an optional baseline: a broken install counts as missing
        return None
    return torch


# onepath's ISA levels as torch's own caps, so that a capped bench caps both sides alike (issue 8:
# bf16 at the cap avx512_core_bf16 on an AMX host against torch under ONEDNN_MAX_CPU_ISA=
# AVX512_CORE_BF16). ONEDNN_MAX_CPU_ISA caps oneDNN (oneDNN's names; it has no scalar x64 level, so
# generic maps to its lowest, SSE41), read once, at oneDNN's first use; ATEN_CPU_CAPABILITY caps
# ATen's own vectorized kernels (default, avx2, avx512), which torch runs where oneDNN does not take
# the op (bf16 matmul below avx512_core, for one), read when torch is imported.
TORCH_CAP_VARS = {
    "ONEDNN_MAX_CPU_ISA": {"generic": "SSE41", "avx2": "AVX2", "avx512_core": "AVX512_CORE",
                           "avx512_core_bf16": "AVX512_CORE_BF16", "avx512_core_amx": "AVX512_CORE_AMX"},
    "ATEN_CPU_CAPABILITY": {"generic": "default", "avx2": "avx2", "avx512_core": "avx512",
                            "avx512_core_bf16": "avx512", "avx512_core_amx": "avx512"},
}
ONEDNN_ISA = TORCH_CAP_VARS["ONEDNN_MAX_CPU_ISA"]
_ALIASES = {"ONEDNN_MAX_CPU_ISA": ("DNNL_MAX_CPU_ISA",)}   # oneDNN also reads its older name

# What the probe runs in a child process with ONEDNN_VERBOSE=1 (onednn_check).
PROBE_DESC = "a 64x64 bf16 matmul in a child process, ONEDNN_VERBOSE=1"
_ONEDNN_PROBE = ("import torch; a = torch.ones(64, 64, dtype=torch.bfloat16); torch.matmul(a, a); "
                 "torch.matmul(a, a)")


def cap_torch_isa(level: str | None, environ=None, modules=None) -> dict | None:
    """For a run whose onepath level in force is ``level`` (None: onepath not capped, returns None),
    cap torch alike: each variable of ``TORCH_CAP_VARS`` is set in ``environ`` (default
    ``os.environ``) to the level's value unless already set there (then kept; oneDNN's older name
    DNNL_MAX_CPU_ISA counts as set). Returns {"level", "vars": {name: value in force or None},
    "set": [names this call set, for ``uncap_torch_isa``], "differs": [names kept with another value
    than the level's], "torch_loaded": torch was imported before (its caps then hold only if it had
    not read them yet)}."""
    import os
    import sys
    if level is None:
        return None
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    cap = {"level": level, "vars": {}, "set": [], "differs": [], "torch_loaded": "torch" in modules}
    for name, values in TORCH_CAP_VARS.items():
        want = values.get(level)
        have = next((environ[n] for n in (name,) + _ALIASES.get(name, ()) if environ.get(n)), None)
        if have is None and want is not None:
            environ[name] = have = want
            cap["set"].append(name)
        elif have is not None and have != want:
            cap["differs"].append(name)
        cap["vars"][name] = have
    return cap


def uncap_torch_isa(cap: dict | None, environ=None) -> None:
    """Remove what ``cap_torch_isa`` set (a later run in this process starts from the user's
    environment; a torch already loaded keeps the caps it read)."""
    import os
    environ = os.environ if environ is None else environ
    for name in (cap or {}).get("set", []):
        environ.pop(name, None)


def parse_onednn_verbose(text: str) -> dict:
    """From ONEDNN_VERBOSE=1 output, the ISA oneDNN reports ("info,cpu,isa:" line) and the
    implementation of the first matmul it ran (e.g. "brg_matmul:avx512_core_bf16"); None where absent."""
    isa = impl = None
    for line in text.splitlines():
        if not line.startswith("onednn_verbose,"):
            continue
        if isa is None and ",info,cpu,isa:" in line:
            isa = line.split(",info,cpu,isa:", 1)[1].strip()
        elif impl is None and ",exec,cpu,matmul," in line:
            impl = line.split(",exec,cpu,matmul,", 1)[1].split(",", 1)[0].strip()
    return {"isa": isa, "matmul_impl": impl}


def onednn_check(timeout: float = 120.0) -> dict | None:
    """What torch's bf16 matmul runs under this process's environment (the caps included):
    ``PROBE_DESC``, parsed by ``parse_onednn_verbose``. None when torch is not installed;
    {"error": ...} when the child fails."""
    import importlib.util
    import os
    import subprocess
    import sys
    if importlib.util.find_spec("torch") is None:
        return None
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    try:
        r = subprocess.run([sys.executable, "-c", _ONEDNN_PROBE], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]}
    return parse_onednn_verbose(r.stdout)


def torch_cap_lines(cap: dict, check: dict | None, torch_present: bool = True) -> list[str]:
    """The bench header's lines on torch's caps, from ``cap_torch_isa`` and ``onednn_check``."""
    level = cap["level"]
    vars_ = ", ".join(f"{k}={v}" + ("" if k in cap["set"] else " (from the environment)")
                      for k, v in cap["vars"].items() if v)
    if not torch_present:
        return [f"{vars_} for onepath's level {level}, but there is no torch baseline (torch not importable)"]
    line = f"torch baseline capped too: {vars_}, for onepath's level {level}"
    if check is not None:
        if "error" in check:
            line += f"; probe failed: {check['error']}"
        elif check["matmul_impl"] is None:
            line += (f"; probe ({PROBE_DESC}): oneDNN not used by torch's bf16 matmul at this cap "
                     "(ATen's own kernels, capped by ATEN_CPU_CAPABILITY)")
        else:
            line += (f"; probe ({PROBE_DESC}): oneDNN isa '{check['isa'] or '?'}', ran "
                     f"{check['matmul_impl']}")
    lines = [line]
    for name in cap["differs"]:
        want = TORCH_CAP_VARS[name].get(level)
        lines.append(f"! {name}={cap['vars'][name]} kept from the environment differs from {want} "
                     f"(onepath's {level}): torch and onepath may run at different levels")
    if cap["torch_loaded"]:
        lines.append("! torch was imported before the bench set its caps: they hold only where torch had "
                     "not read them yet (oneDNN reads its cap at its first use)")
    return lines


def missing_note(names) -> str:
    """One line per missing baseline, e.g. 'no torch baseline: torch is not installed
    (pip install torch==2.13.0 to measure onepath against it)'."""
    return "\n".join(f"no {n} baseline: {n} is not installed ({INSTALL.get(n, 'pip install ' + n)} "
                     f"to measure onepath against it)" for n in names)
