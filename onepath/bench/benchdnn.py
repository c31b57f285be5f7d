"""oneDNN benchdnn convolution problem descriptors, e.g. ``mb1ic64ih56oc64oh56kh3ph1n"res2a"``.

Grammar (benchdnn's ``--conv`` descriptors, 2-D): a sequence of ``<key><int>`` fields in any order,
optionally separated by ``_``, plus an optional name ``n"..."``. Keys: g (groups), mb (batch), ic, ih,
iw, oc, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw. Rules, as benchdnn applies them:

* a missing ``w`` value (iw, ow, kw, sw, pw, dw) copies the ``h`` one;
* defaults: g1, mb2 (benchdnn's default minibatch), sh1, ph0 (when oh is not given), dh0;
* dilation counts from 0 (``dh0`` is a dense kernel; PyTorch's dilation = dh + 1);
* a missing output size is derived: oh = (ih + 2 ph - ((kh - 1)(dh + 1) + 1)) / sh + 1; a given oh
  with a missing ph derives ph = ((oh - 1) sh - ih + (kh - 1)(dh + 1) + 1) / 2; given oh and ph
  must agree (the bottom/right padding is then the one that makes them agree, as benchdnn does).

3-D fields (id, od, kd, sd, pd, dd) are rejected: onepath's conv is 2-D.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_KEYS = ("g", "mb", "ic", "ih", "iw", "oc", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw")
_TOKEN = re.compile(r'n"(?P<name>[^"]*)"|(?P<key>[a-z]+)(?P<val>-?\d+)|(?P<sep>_+)')


class DescriptorError(ValueError):
    """A descriptor that does not parse or describes an impossible problem."""


@dataclass(frozen=True)
class ConvDesc:
    """A parsed 2-D conv problem (PyTorch conventions: dilation from 1; explicit padding pairs)."""
    g: int
    mb: int
    ic: int
    ih: int
    iw: int
    oc: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int            # top padding
    pw: int            # left padding
    dh: int            # benchdnn dilation (from 0)
    dw: int
    name: str = ""

    @property
    def dilation(self) -> tuple[int, int]:
        """PyTorch dilation (benchdnn's + 1)."""
        return (self.dh + 1, self.dw + 1)

    @property
    def padding(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """((top, bottom), (left, right)) reproducing oh/ow exactly (bottom/right may differ)."""
        def after(i, o, k, s, p, d):
            ek = (k - 1) * (d + 1) + 1
            return max(0, (o - 1) * s + ek - i - p)
        return ((self.ph, after(self.ih, self.oh, self.kh, self.sh, self.ph, self.dh)),
                (self.pw, after(self.iw, self.ow, self.kw, self.sw, self.pw, self.dw)))

    @property
    def flops(self) -> float:
        return 2.0 * self.mb * self.oc * (self.ic // self.g) * self.kh * self.kw * self.oh * self.ow

    def text(self) -> str:
        """The canonical descriptor (every field written)."""
        s = (f"g{self.g}mb{self.mb}ic{self.ic}ih{self.ih}iw{self.iw}oc{self.oc}oh{self.oh}ow{self.ow}"
             f"kh{self.kh}kw{self.kw}sh{self.sh}sw{self.sw}ph{self.ph}pw{self.pw}dh{self.dh}dw{self.dw}")
        return s + (f'n"{self.name}"' if self.name else "")

    def short(self) -> str:
        """A compact label: only the fields that differ from what benchdnn would derive."""
        s = f"mb{self.mb}" + (f"g{self.g}" if self.g != 1 else "") + f"ic{self.ic}ih{self.ih}"
        s += f"iw{self.iw}" if self.iw != self.ih else ""
        s += f"oc{self.oc}oh{self.oh}" + (f"ow{self.ow}" if self.ow != self.oh else "")
        s += f"kh{self.kh}" + (f"kw{self.kw}" if self.kw != self.kh else "")
        s += (f"sh{self.sh}" if self.sh != 1 else "") + (f"sw{self.sw}" if self.sw != self.sh else "")
        s += (f"ph{self.ph}" if self.ph else "") + (f"pw{self.pw}" if self.pw != self.ph else "")
        s += (f"dh{self.dh}" if self.dh else "") + (f"dw{self.dw}" if self.dw != self.dh else "")
        return s


def parse(text: str) -> ConvDesc:
    """Parse one benchdnn conv descriptor. Raises DescriptorError with the reason."""
    src = text.strip()
    if src.startswith("--conv"):
        src = src.split(None, 1)[1] if " " in src else ""
    fields: dict[str, int] = {}
    name = ""
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m:
            raise DescriptorError(f"cannot parse descriptor {text!r} at {src[pos:]!r}")
        pos = m.end()
        if m.group("sep"):
            continue
        if m.group("name") is not None:
            name = m.group("name")
            continue
        key, val = m.group("key"), int(m.group("val"))
        if key in ("id", "od", "kd", "sd", "pd", "dd"):
            raise DescriptorError(f"{text!r}: 3-D field {key!r} is not supported (2-D convolutions only)")
        if key not in _KEYS:
            raise DescriptorError(f"{text!r}: unknown field {key!r}; valid: {', '.join(_KEYS)}, n\"name\"")
        if key in fields:
            raise DescriptorError(f"{text!r}: field {key!r} given twice")
        fields[key] = val
    for need in ("ic", "oc"):
        if need not in fields:
            raise DescriptorError(f"{text!r}: missing {need}")
    if "ih" not in fields and "iw" not in fields:
        raise DescriptorError(f"{text!r}: missing ih")
    if "kh" not in fields and "kw" not in fields:
        raise DescriptorError(f"{text!r}: missing kh")
    f = dict(fields)
    for h, w in (("ih", "iw"), ("kh", "kw"), ("sh", "sw"), ("dh", "dw")):
        if h not in f and w in f:
            f[h] = f[w]
        if h in f:
            f.setdefault(w, f[h])
    f.setdefault("g", 1)
    f.setdefault("mb", 2)
    f.setdefault("sh", 1)
    f.setdefault("sw", f["sh"])
    f.setdefault("dh", 0)
    f.setdefault("dw", f["dh"])
    for key in ("g", "mb", "ic", "ih", "iw", "oc", "kh", "kw", "sh", "sw"):
        if f[key] < (0 if key == "mb" else 1):
            raise DescriptorError(f"{text!r}: {key}{f[key]} must be >= {0 if key == 'mb' else 1}")
    if f["dh"] < 0 or f["dw"] < 0:
        raise DescriptorError(f"{text!r}: dilation must be >= 0 (benchdnn counts from 0)")
    if "oh" in f and "ow" not in f and "pw" not in f and f["iw"] == f["ih"] and f["kw"] == f["kh"]:
        f["ow"] = f["oh"]
    if "ph" in f and "pw" not in f:
        f["pw"] = f["ph"]
    for i, o, k, s, p, d in (("ih", "oh", "kh", "sh", "ph", "dh"), ("iw", "ow", "kw", "sw", "pw", "dw")):
        ek = (f[k] - 1) * (f[d] + 1) + 1
        if o not in f:
            f.setdefault(p, 0)
            f[o] = (f[i] + 2 * f[p] - ek) // f[s] + 1
        elif p not in f:
            f[p] = max(0, ((f[o] - 1) * f[s] - f[i] + ek) // 2)
        if f[p] < 0:
            raise DescriptorError(f"{text!r}: negative padding {p}{f[p]}")
        if f[o] < 1:
            raise DescriptorError(f"{text!r}: the kernel ({ek}) is larger than the padded input "
                                  f"({f[i]} + 2*{f[p]})")
        lo = (f[i] + f[p] - ek) // f[s] + 1          # no padding after
        hi = (f[i] + 2 * f[p] - ek) // f[s] + 1      # symmetric padding
        if "oh" in fields or "ow" in fields:
            # a given output must be reachable with 0 <= padding-after <= (kernel extent - 1)
            if f[o] < lo or (f[o] - 1) * f[s] + ek - f[i] - f[p] > ek - 1 + f[p]:
                raise DescriptorError(f"{text!r}: {o}{f[o]} is inconsistent with {i}{f[i]} {k}{f[k]} "
                                      f"{s}{f[s]} {p}{f[p]} (expected {hi})")
    if f["ic"] % f["g"] or f["oc"] % f["g"]:
        raise DescriptorError(f"{text!r}: g{f['g']} must divide ic{f['ic']} and oc{f['oc']}")
    return ConvDesc(name=name, **{k: f[k] for k in _KEYS})


def parse_lines(lines) -> list[ConvDesc]:
    """Descriptors of an iterable of lines: blank lines and ``#`` comments skipped; benchdnn
    option lines (``--...``) other than ``--conv`` ignored."""
    out = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line or (line.startswith("--") and not line.startswith("--conv ")):
            continue
        out.append(parse(line))
    return out


def load(path_or_desc: str) -> list[ConvDesc]:
    """A descriptor string, or a path to a file of descriptors (one per line), or the name of a
    file shipped with onepath (``resnet50``, ``mobilenet_v2_dw``)."""
    import os
    from importlib import resources
    if os.path.isfile(path_or_desc):
        with open(path_or_desc, encoding="utf-8") as fh:
            return parse_lines(fh)
    shipped = resources.files("onepath.bench") / f"{path_or_desc}.txt"
    if "/" not in path_or_desc and shipped.is_file():
        return parse_lines(shipped.read_text(encoding="utf-8").splitlines())
    return [parse(path_or_desc)]
