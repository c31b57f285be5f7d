"""benchdnn conv descriptor grammar (onepath/bench/benchdnn.py) and the conv bench suites."""
from __future__ import annotations

import numpy as np
import pytest

from onepath.bench import benchdnn
from onepath.bench.benchdnn import DescriptorError, parse


def test_issue_example():
    d = parse("mb1ic64ih56oc64oh56kh3ph1")
    assert (d.mb, d.ic, d.ih, d.iw, d.oc, d.oh, d.ow, d.kh, d.kw) == (1, 64, 56, 56, 64, 56, 56, 3, 3)
    assert (d.sh, d.sw, d.ph, d.pw, d.dh, d.dw, d.g) == (1, 1, 1, 1, 0, 0, 1)
    assert d.dilation == (1, 1) and d.padding == ((1, 1), (1, 1))
    assert d.flops == 2.0 * 64 * 64 * 9 * 56 * 56


def test_defaults_w_copies_h_and_derived_outputs():
    d = parse("ic16ih10oc8kh3")
    assert d.mb == 2 and d.g == 1 and d.iw == 10 and d.kw == 3 and d.oh == d.ow == 8 and d.ph == 0
    d = parse("mb1ic3ih224oc64kh7sh2ph3")
    assert d.oh == d.ow == 112 and d.sw == 2 and d.pw == 3
    d = parse("mb1ic8ih9iw13oc4kh3kw5sh2sw1ph1pw2")
    assert (d.oh, d.ow) == ((9 + 2 - 3) // 2 + 1, (13 + 4 - 5) // 1 + 1)
    # oh given, ph derived
    d = parse("mb1ic64ih56oc64oh56kh3")
    assert d.ph == d.pw == 1
    # underscores and names
    d = parse('mb1_g2ic8oc4_ih7oh7kh3ph1_n"my layer"')
    assert d.g == 2 and d.name == "my layer" and d.oh == 7
    assert parse(d.text()) == d


def test_dilation_counts_from_zero():
    d0 = parse("mb1ic4ih9oc4kh3dh0")
    assert d0.dilation == (1, 1) and d0.oh == 7
    d1 = parse("mb1ic4ih9oc4kh3dh1")
    assert d1.dilation == (2, 2) and d1.oh == 5  # effective kernel 5
    d = parse("mb1ic4ih9oc4kh3dh1dw0")
    assert d.dilation == (2, 1) and (d.oh, d.ow) == (5, 7)


@pytest.mark.parametrize("text, match", [
    ("mb1ic64xx", "cannot parse"),
    ("mb1ic64ih56kh3", "missing oc"),
    ("mb1oc4ih5kh3", "missing ic"),
    ("mb1ic4oc4kh3", "missing ih"),
    ("mb1ic4oc4ih5", "missing kh"),
    ("mb1ic4oc4ih5kh3ic8", "given twice"),
    ("mb1ic4id5oc4ih5kh3", "3-D"),
    ("mb1ic4oc4ih2kh3", "larger than the padded input"),
    ("g3mb1ic4oc4ih5kh3", "must divide"),
    ("mb1ic4oc4ih5oh9kh3ph0", "inconsistent"),
    ("mb1ic4oc4ih5kh3sh0", "sh0"),
    ("mb1ic4oc4ih5kh3zz1", "unknown field"),
])
def test_errors(text, match):
    with pytest.raises(DescriptorError, match=match):
        parse(text)


def test_files_and_shipped_sets(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("# comment\n\nmb1ic4ih5oc4kh3ph1  # trailing\n--dir=FWD_B\n--conv g2mb1ic4ih5oc4kh3\n")
    ds = benchdnn.load(str(f))
    assert [d.g for d in ds] == [1, 2]
    r50 = benchdnn.load("resnet50")
    assert len(r50) >= 20 and r50[0].kh == 7 and r50[0].oh == 112 and r50[0].name == "conv1"
    assert all(d.mb == 1 for d in r50)
    dw = benchdnn.load("mobilenet_v2_dw")
    assert all(d.g == d.ic == d.oc and d.kh == 3 for d in dw)
    assert [d.oh for d in dw][:2] == [112, 56]


def test_descriptor_runs_like_torch_geometry():
    """The parsed geometry runs in onepath.conv2d and gives oh x ow."""
    import onepath
    for text in ("mb2ic6ih9iw7oc4kh3kw2sh2sw1ph1pw0dh1", "g4mb1ic8ih8oc8oh4kh3sh2", "mb1ic3ih11oc2kh3ph0oh5sh2"):
        d = parse(text)
        x = np.ones((d.mb, d.ic, d.ih, d.iw), np.float32)
        w = np.ones((d.oc, d.ic // d.g, d.kh, d.kw), np.float32)
        y = onepath.conv2d(x, w, stride=(d.sh, d.sw), padding=d.padding, dilation=d.dilation, groups=d.g)
        assert y.shape == (d.mb, d.oc, d.oh, d.ow)


def test_conv_suite_small():
    from onepath.bench.conv_suite import conv_suite
    from onepath.bench.core import BenchConfig
    cases = list(conv_suite(BenchConfig(shapes=(8,))))
    assert len(cases) == 1 and cases[0].op == "conv2d"
    assert np.asarray(cases[0].run()).shape == (1, 8, 8, 8)
    if "torch" in cases[0].baselines:
        assert cases[0].meta["max_rel_err_vs_torch"] < 1e-4
