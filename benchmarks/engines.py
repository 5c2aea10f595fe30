"""bertkit's sentence embeddings against the fastest CPU inference engines, in one interleaved run.

all-MiniLM-L6-v2 (the local asset) embeds the same real polarity sentences on every line: the same
batch size, the same thread count, mean pooling over the real tokens and L2 normalisation, and
tokenization inside the timed pass. Each engine runs at its documented best CPU setting, converted
here from the local folder:

- bertkit ``pipeline("sentence-embedding")`` at dtype auto, bf16, fp32 and int8;
- sentence-transformers fp32 and bf16 (the model cast to bfloat16);
- ONNX Runtime fp32 (graph optimisations on) and dynamic int8 with per-channel weight scales;
- OpenVINO bf16 (``INFERENCE_PRECISION_HINT``) and int8 (NNCF weight and activation quantization);
- CTranslate2 int8 (``compute_type="int8"``).

The engines, ONNX export and NNCF are the ``bench`` extra, never a runtime dependency: an engine that
is not installed (or fails to convert) prints a line that says so and is left out. Every pass of every
engine is interleaved, passes alternate their order, and each line reports the median over repeats:
real (non-padding) tokens per second, milliseconds per pass, and the min and mean cosine of its
sentence vectors against sentence-transformers fp32.

    python benchmarks/engines.py [--sentences 512] [--batch-size 32] [--threads 2] [--repeats 3] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from bertkit.assets import asset_path
from bertkit.inference import cpu_flags, describe_cpu, resolve_dtype
from bertkit.pipelines import pipeline

Embed = Callable[[list[str]], np.ndarray]


def load_texts(n: int) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over the real tokens, then L2 normalisation: sentence-transformers' all-MiniLM-L6-v2 pooling."""
    m = mask[..., None].astype(np.float32)
    v = (hidden.astype(np.float32) * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


class Batches:
    """The reference tokenizer (HF ``tokenizers``), length-sorted batches, results put back in order."""

    def __init__(self, folder: Path, batch_size: int, max_length: int = 256) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.enable_truncation(max_length)
        self.batch_size = batch_size

    def run(self, texts: list[str], forward: Callable[[dict[str, np.ndarray]], np.ndarray]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[np.ndarray | None] = [None] * len(texts)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            self.tok.enable_padding()
            encs = self.tok.encode_batch([texts[i] for i in idx])
            feed = {
                "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64),
            }
            vecs = mean_pool(forward(feed), feed["attention_mask"])
            for j, i in enumerate(idx):
                out[i] = vecs[j]
        return np.stack(out)  # type: ignore[arg-type]


def export_onnx(folder: Path, work: Path) -> Path:
    """transformers' BertModel exported by torch (last_hidden_state only), dynamic batch and length."""
    import transformers

    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    path = work / "minilm.onnx"
    ids = torch.ones(2, 16, dtype=torch.long)

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]

    axes = {
        "input_ids": {0: "b", 1: "n"},
        "attention_mask": {0: "b", 1: "n"},
        "token_type_ids": {0: "b", 1: "n"},
        "last_hidden_state": {0: "b", 1: "n"},
    }
    torch.onnx.export(
        LastHidden(),
        (ids, ids, torch.zeros_like(ids)),
        str(path),
        dynamo=False,
        opset_version=17,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state"],
        dynamic_axes=axes,
    )
    return path


def onnxruntime_engines(onnx_path: Path, batches: Batches, threads: int, work: Path) -> dict[str, Embed]:
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q_path = work / "minilm-int8.onnx"
    quantize_dynamic(str(onnx_path), str(q_path), per_channel=True, weight_type=QuantType.QInt8)
    engines = {}
    for name, path in (("ONNX Runtime fp32", onnx_path), ("ONNX Runtime int8 per-channel", q_path)):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        engines[name] = lambda t, s=sess: batches.run(t, lambda feed: s.run(None, feed)[0])
    return engines


def openvino_engines(onnx_path: Path, batches: Batches, threads: int, texts: list[str]) -> dict[str, Embed]:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(onnx_path))
    engines: dict[str, Embed] = {}
    bf16 = core.compile_model(
        model,
        "CPU",
        {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"},
    )
    engines["OpenVINO bf16"] = lambda t: batches.run(t, lambda feed: bf16(feed)[0])
    try:
        import nncf

        calib = []
        batches.run(texts[:96], lambda feed: calib.append(dict(feed)) or np.zeros((len(feed["input_ids"]), 1, 1)))
        q_model = nncf.quantize(
            model, nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib)
        )
        int8 = core.compile_model(q_model, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
        engines["OpenVINO + NNCF int8"] = lambda t: batches.run(t, lambda feed: int8(feed)[0])
    except ImportError:
        print("  (skipped) OpenVINO + NNCF int8: nncf is not installed (pip install nncf)")
    return engines


def ctranslate2_engine(folder: Path, batches: Batches, threads: int, work: Path) -> dict[str, Embed]:
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    out = work / "ct2"
    TransformersConverter(str(folder)).convert(str(out), quantization="int8", force=True)
    enc = ctranslate2.Encoder(str(out), device="cpu", compute_type="int8", intra_threads=threads, inter_threads=1)
    tok = batches.tok

    def forward(feed: dict[str, np.ndarray]) -> np.ndarray:
        ids = [list(row[: int(m.sum())]) for row, m in zip(feed["input_ids"], feed["attention_mask"])]
        tokens = [[tok.id_to_token(int(i)) for i in row] for row in ids]
        hidden = np.asarray(enc.forward_batch(tokens).last_hidden_state)
        return hidden

    return {"CTranslate2 int8": lambda t: batches.run(t, forward)}


def build_engines(folder: Path, texts: list[str], args: argparse.Namespace, work: Path) -> dict[str, Embed]:
    """Every engine that is installed here, each behind one ``texts -> (n, 384) unit vectors`` call."""
    engines: dict[str, Embed] = {}
    for d in ("auto", "bf16", "fp32", "int8"):
        pipe = pipeline(
            "sentence-embedding", model=folder, dtype=d, batch_size=args.batch_size, truncation="cut"
        )  # as sentence-transformers does
        engines[f"bertkit {d} ({pipe.dtype})"] = lambda t, p=pipe: p(t, return_tensors=True).float().numpy()
    try:
        import sentence_transformers

        st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
        st16 = sentence_transformers.SentenceTransformer(str(folder), device="cpu").to(torch.bfloat16)
        engines["sentence-transformers fp32"] = lambda t: st.encode(
            t, batch_size=args.batch_size, normalize_embeddings=True
        )
        engines["sentence-transformers bf16"] = lambda t: st16.encode(
            t, batch_size=args.batch_size, normalize_embeddings=True
        ).astype(np.float32)
    except ImportError:
        print("  (skipped) sentence-transformers: not installed")
    batches = Batches(folder, args.batch_size)
    onnx_path = None
    try:
        onnx_path = export_onnx(folder, work)
    except Exception as e:  # noqa: BLE001 - a missing exporter dependency leaves out the ONNX-based engines
        print(f"  (skipped) ONNX export failed ({type(e).__name__}: {e}); ONNX Runtime and OpenVINO left out")
    for name, make in (
        ("onnxruntime", lambda: onnxruntime_engines(onnx_path, batches, args.threads, work)),
        ("openvino", lambda: openvino_engines(onnx_path, batches, args.threads, texts)),
        ("ctranslate2", lambda: ctranslate2_engine(folder, batches, args.threads, work)),
    ):
        if name != "ctranslate2" and onnx_path is None:
            continue
        try:
            engines.update(make())
        except ImportError as e:
            print(f"  (skipped) {name}: not installed ({e}); pip install 'bertkit[bench]'")
        except Exception as e:  # noqa: BLE001 - a conversion that fails here is reported, the others still run
            print(f"  (skipped) {name}: {type(e).__name__}: {e}")
    return engines


def time_all(engines: dict[str, Embed], texts: list[str], repeats: int, pause: float = 0.5) -> dict[str, float]:
    """Median seconds per pass, passes interleaved and alternating in order so drift hits all alike.

    Each pass starts ``pause`` seconds after the one before: engines' thread pools spin for a while after
    their pass (ONNX Runtime, OpenMP, TBB), and a pool still spinning takes cores from the next engine's pass.
    """
    for fn in engines.values():
        fn(texts)  # warm-up: one-time graph and kernel set-up is not what a server pays per request
    times: dict[str, list[float]] = {k: [] for k in engines}
    names = list(engines)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            time.sleep(pause)
            t0 = time.perf_counter()
            engines[name](texts)
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=[], help="keep the engines whose name contains one of these")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between passes, so no pool spins into the next")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    folder = asset_path("minilm")
    texts = load_texts(args.sentences)
    flags = cpu_flags()
    print(
        f"CPU flags: {describe_cpu(flags)}; auto -> {resolve_dtype('auto', flags)}; {args.threads} threads; "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory(prefix="engines-") as work:
        engines = build_engines(folder, texts, args, Path(work))
        if args.only:
            engines = {k: v for k, v in engines.items() if any(o.lower() in k.lower() for o in args.only)}
        vecs = {k: np.asarray(fn(texts), dtype=np.float32) for k, fn in engines.items()}
        med = time_all(engines, texts, args.repeats, args.pause)
    ref = next(vecs[k] for k in ("sentence-transformers fp32", "bertkit fp32 (fp32)", *vecs) if k in vecs)
    counter = Batches(folder, args.batch_size).tok
    counter.no_padding()  # tokenizer.json pads to a fixed length; count the real tokens only
    real_tokens = sum(len(e.ids) for e in counter.encode_batch(texts))
    print(
        f"{len(texts)} polarity sentences, {real_tokens:,} real tokens, batch {args.batch_size}, "
        f"median of {args.repeats} interleaved passes {args.pause:g} s apart; cosine against sentence-transformers fp32"
    )
    print(f"  {'engine':<34s} {'real tokens/s':>14s} {'ms/pass':>9s} {'min cos':>9s} {'mean cos':>9s}")
    for k in sorted(med, key=lambda k: med[k]):
        cos = (vecs[k] / np.linalg.norm(vecs[k], axis=1, keepdims=True) * ref).sum(1)
        print(f"  {k:<34s} {real_tokens / med[k]:>14,.0f} {med[k] * 1000:>9.0f} {cos.min():>9.5f} {cos.mean():>9.5f}")
    auto = next((k for k in med if k.startswith("bertkit auto")), None)
    for anchor, target in (("OpenVINO bf16", 1.5), ("sentence-transformers bf16", 2.5)):
        if auto and anchor in med:
            print(f"ratio {auto} / {anchor}: {med[anchor] / med[auto]:.2f}x (target >= {target}x)")
    if "ONNX Runtime fp32" in med and "bertkit fp32 (fp32)" in med:
        print(
            f"ratio bertkit fp32 / ONNX Runtime fp32: {med['ONNX Runtime fp32'] / med['bertkit fp32 (fp32)']:.2f}x "
            f"(target >= 1.3x)"
        )
    if "bertkit bf16 (bf16)" in med and "bertkit int8 (int8)" in med:
        print(
            f"ratio bertkit int8 / bertkit bf16: {med['bertkit bf16 (bf16)'] / med['bertkit int8 (int8)']:.2f}x "
            f"(int8 should win on a CPU with AMX-INT8 or VNNI)"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
