"""Convolution rows of ``python -m onepath bench``: ResNet-50 layers and MobileNet-v2 depthwise layers
(benchdnn descriptors shipped as ``resnet50.txt`` / ``mobilenet_v2_dw.txt``), float32 and bfloat16,
NCHW and NHWC, batch 1 and 8, with torch.nn.functional.conv2d as the baseline when torch is installed
(torch tensors in the same layout: channels_last for NHWC). ``python -m onepath bench conv --desc D``
runs the descriptors D (a descriptor, a file of them, or a shipped file name) instead.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import onepath
from onepath.ops import conv as _conv

from . import benchdnn
from .baselines import torch_or_none
from .core import BenchConfig, Case, aligned, register_suite

# Set by ``python -m onepath bench conv --desc ...`` (a list of descriptor strings / files).
DESCRIPTORS: list[str] | None = None
# Batch override for --desc runs (``--mb N``), None: the descriptor's own.
MB: int | None = None


def _torch():
    torch = torch_or_none()
    return (torch, torch.nn.functional) if torch is not None else (None, None)


def conv_case(d: benchdnn.ConvDesc, dtype: str, layout: str, cfg: BenchConfig, group: str,
              rng: np.random.Generator) -> Case:
    """One conv problem: onepath.conv2d vs torch's conv2d (same dtype and memory layout)."""
    from ml_dtypes import bfloat16
    x = aligned(rng.standard_normal((d.mb, d.ic, d.ih, d.iw), dtype=np.float32))
    w = aligned((rng.standard_normal((d.oc, d.ic // d.g, d.kh, d.kw), dtype=np.float32)
                 / np.sqrt(d.ic // d.g * d.kh * d.kw)).astype(np.float32))
    np_dt = bfloat16 if dtype == "bfloat16" else np.float32
    xo = aligned((x.transpose(0, 2, 3, 1) if layout == "NHWC" else x).astype(np_dt))
    wo = aligned(w.astype(np_dt))
    kw = dict(stride=(d.sh, d.sw), padding=d.padding, dilation=d.dilation, groups=d.g, layout=layout)

    def run():
        return onepath.conv2d(xo, wo, **kw)

    baselines = {}
    algo = _conv.algorithm_for(d.ic, d.oc, d.kh, d.kw, d.g)
    meta = {"desc": d.text(), "layout": layout, "dtype": dtype, "algorithm": algo}
    row = None
    try:  # the registry row this case actually runs (the algorithm is picked per problem)
        row = _conv.select_conv(algo, dtype)
        meta.update(kernel=row.name, kernel_level=row.level,
                    kernel_mrnr=f"{row.mr}x{row.nr}")
    except ValueError:
        pass
    torch, F = _torch()
    if torch is None:
        meta["missing_baselines"] = ["torch"]
    else:
        tdt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        tx = torch.from_numpy(x).to(tdt)
        tw = torch.from_numpy(w).to(tdt)
        if layout == "NHWC":
            tx = tx.contiguous(memory_format=torch.channels_last)
            tw = tw.contiguous(memory_format=torch.channels_last)
        (pt, pb), (pl, pr) = d.padding
        sym = pt == pb and pl == pr
        if not sym:  # torch needs symmetric padding: pad the input explicitly once (not timed)
            tx = torch.nn.functional.pad(tx, (pl, pr, pt, pb))
        targs = dict(stride=(d.sh, d.sw), padding=(pt, pl) if sym else 0, dilation=d.dilation,
                     groups=d.g)
        with torch.no_grad():
            def tconv():
                return F.conv2d(tx, tw, None, **targs)
            ref = tconv().float()
        ref = (ref.permute(0, 2, 3, 1) if layout == "NHWC" else ref).contiguous().numpy()
        got = np.asarray(run(), np.float32)
        if got.shape != ref.shape:
            meta["max_rel_err_vs_torch"] = float("inf")
        elif ref.size:  # (an empty problem, e.g. mb0, has nothing to compare)
            scale = float(np.max(np.abs(ref))) or 1.0
            meta["max_rel_err_vs_torch"] = float(np.max(np.abs(got - ref))) / scale
        baselines["torch"] = tconv
    name = (d.name + " " if d.name else "") + d.short()
    return Case(name=name, group=group, op="conv2d", dtype=dtype, flops=d.flops,
                bytes=float(xo.nbytes + wo.nbytes + d.mb * d.oc * d.oh * d.ow * xo.itemsize),
                run=run, baselines=baselines, rtol=None, memory_bound=None, meta=meta, kernel=row,
                peak="f32" if dtype == "float32" else None)  # only the float32 FMA peak is measured


def _variants(cfg: BenchConfig, quick_layouts=("NCHW",)):
    dtypes = ("float32", "bfloat16")
    layouts = quick_layouts if cfg.quick else ("NCHW", "NHWC")
    batches = (1,) if cfg.quick else (1, 8)
    return dtypes, layouts, batches


@register_suite("conv", title="conv2d: ResNet-50 layers", order=40)
def conv_suite(cfg: BenchConfig):
    rng = cfg.rng()
    if cfg.shapes:  # tests / quick looks: one small 3x3 layer per size
        for s in cfg.shapes:
            d = benchdnn.parse(f"mb1ic{min(s, 64)}ih{s}oc{min(s, 64)}kh3ph1")
            yield conv_case(d, "float32", "NCHW", cfg, "shape", rng)
        return
    layers = benchdnn.load("resnet50")
    if cfg.quick:
        layers = [d for d in layers if d.kh > 1]
    dtypes, layouts, batches = _variants(cfg)
    for mb in batches:
        for dtype in dtypes:
            for layout in layouts:
                for d in layers:
                    yield conv_case(replace(d, mb=mb), dtype, layout, cfg,
                                    f"ResNet-50 mb{mb} {'f32' if dtype == 'float32' else 'bf16'} {layout}", rng)


@register_suite("conv_dw", title="conv2d: MobileNet-v2 depthwise 3x3", order=41)
def conv_dw_suite(cfg: BenchConfig):
    if cfg.shapes:
        return
    rng = cfg.rng()
    layers = benchdnn.load("mobilenet_v2_dw")
    dtypes, layouts, batches = _variants(cfg)
    for mb in batches:
        for dtype in dtypes:
            for layout in layouts:
                for d in layers:
                    yield conv_case(replace(d, mb=mb), dtype, layout, cfg,
                                    f"MobileNet-v2 dw mb{mb} {'f32' if dtype == 'float32' else 'bf16'} {layout}", rng)


@register_suite("conv_desc", title="conv2d: benchdnn descriptors", default=False, order=42)
def conv_desc_suite(cfg: BenchConfig):
    rng = cfg.rng()
    descs = []
    for item in DESCRIPTORS or []:
        descs += benchdnn.load(item)
    for d in descs:
        if MB is not None:
            d = replace(d, mb=MB)
        for dtype in ("float32", "bfloat16"):
            for layout in (("NCHW",) if cfg.quick else ("NCHW", "NHWC")):
                yield conv_case(d, dtype, layout, cfg, f"{'f32' if dtype == 'float32' else 'bf16'} {layout}", rng)
