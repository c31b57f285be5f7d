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


# onepath's ISA levels as oneDNN's ONEDNN_MAX_CPU_ISA values (oneDNN's names; it has no scalar x64
# level, so generic maps to its lowest, SSE41). The bench caps torch's oneDNN with it when --isa caps
# onepath, so both sides of a capped run use the same instruction set (issue 8: bf16 at the cap
# avx512_core_bf16 on an AMX host against torch under ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16).
ONEDNN_ISA = {"generic": "SSE41", "avx2": "AVX2", "avx512_core": "AVX512_CORE",
              "avx512_core_bf16": "AVX512_CORE_BF16", "avx512_core_amx": "AVX512_CORE_AMX"}

# A bfloat16 matmul run by torch in a child process with ONEDNN_VERBOSE=1: its oneDNN lines say which
# ISA oneDNN settled on and which implementation ran (onednn_check).
_ONEDNN_PROBE = ("import torch; a = torch.ones(64, 64, dtype=torch.bfloat16); torch.matmul(a, a); "
                 "torch.matmul(a, a)")


def cap_torch_isa(level: str | None, environ=None, modules=None) -> dict | None:
    """For a run capped at onepath ISA ``level`` (None: not capped, returns None), cap torch's oneDNN
    at the same level by setting ``ONEDNN_MAX_CPU_ISA`` in ``environ`` (default ``os.environ``)
    before torch is imported. Returns {"level", "onednn_max_cpu_isa": the value in force or None,
    "how": "set by --isa" | "already set in the environment (kept)" | "torch already imported: not
    capped" | "no oneDNN name for this level"}. oneDNN reads the variable once, at its first use."""
    import os
    import sys
    if level is None:
        return None
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    want = ONEDNN_ISA.get(level)
    have = environ.get("ONEDNN_MAX_CPU_ISA")
    if have:
        how = "already set in the environment (kept)"
    elif want is None:
        how = "no oneDNN name for this level"
    elif "torch" in modules:
        how = "torch already imported: not capped"
    else:
        environ["ONEDNN_MAX_CPU_ISA"] = have = want
        how = "set by --isa"
    return {"level": level, "onednn_max_cpu_isa": have, "how": how}


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
    """Which ISA torch's oneDNN uses under this process's environment (ONEDNN_MAX_CPU_ISA included):
    a bfloat16 matmul in a child process with ONEDNN_VERBOSE=1, parsed by ``parse_onednn_verbose``.
    None when torch is not installed; {"error": ...} when the child fails."""
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


def torch_cap_line(cap: dict, check: dict | None) -> str:
    """The bench header's line on torch's oneDNN cap, from ``cap_torch_isa`` and ``onednn_check``."""
    line = (f"torch baseline capped too: ONEDNN_MAX_CPU_ISA={cap['onednn_max_cpu_isa']} ({cap['how']})"
            if cap["onednn_max_cpu_isa"] else f"torch baseline not capped ({cap['how']})")
    if check is None:
        return line
    if "error" in check:
        return line + f"; oneDNN check failed: {check['error']}"
    return (line + f"; ONEDNN_VERBOSE: isa '{check['isa'] or '?'}', bfloat16 matmul ran "
            f"{check['matmul_impl'] or 'no oneDNN primitive'}")


def missing_note(names) -> str:
    """One line per missing baseline, e.g. 'no torch baseline: torch is not installed
    (pip install torch==2.13.0 to measure onepath against it)'."""
    return "\n".join(f"no {n} baseline: {n} is not installed ({INSTALL.get(n, 'pip install ' + n)} "
                     f"to measure onepath against it)" for n in names)
