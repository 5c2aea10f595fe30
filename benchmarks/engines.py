"""bertkit's sentence embeddings against the fastest CPU inference engines, in one interleaved run.

all-MiniLM-L6-v2 (the local asset) embeds the same real polarity sentences on every line: the same
batch size, the same thread count, mean pooling over the real tokens and L2 normalisation, and
tokenization inside the timed pass. Each engine runs at its documented best CPU setting, converted
here from the local folder:

- bertkit ``pipeline("sentence-embedding")`` at dtype auto, bf16, fp32 and int8, and bertkit's
  ``SentenceTransformer(dtype="auto").encode`` (the class a sentence-transformers script imports);
- sentence-transformers fp32 and bf16 (the model cast to bfloat16);
- ONNX Runtime fp32 (graph optimisations on) and dynamic int8 with per-channel weight scales;
- OpenVINO bf16 (``INFERENCE_PRECISION_HINT``) and int8 (NNCF weight and activation quantization);
- CTranslate2 int8 (``compute_type="int8"``).

The engines, ONNX export and NNCF are the ``bench`` extra, never a runtime dependency: an engine that
is not installed (or fails to convert) prints a line that says so and is left out. Each engine runs in
a process of its own, built and warmed up one after another: in one shared process the engines' thread
pools and runtimes slowed one another (sentence-transformers bf16 took 824 ms a pass there against
657-704 ms alone, while bertkit's time did not change). The passes of every engine are interleaved, in
alternating order, ``--pause`` seconds apart, and each line reports the median over repeats: real
(non-padding) tokens per second, milliseconds per pass, and the min and mean cosine of its sentence
vectors against sentence-transformers fp32.

    python benchmarks/engines.py [--sentences 512] [--batch-size 32] [--threads 2] [--repeats 3] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import statistics
import subprocess
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


def onnxruntime_engine(onnx_path: Path, batches: Batches, threads: int, work: Path, int8: bool) -> Embed:
    """ONNX Runtime on the exported graph (fp32), or on its dynamic int8 form with per-channel weight scales."""
    import onnxruntime as ort

    path = onnx_path
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        path = work / "minilm-int8.onnx"
        quantize_dynamic(str(onnx_path), str(path), per_channel=True, weight_type=QuantType.QInt8)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda t: batches.run(t, lambda feed: sess.run(None, feed)[0])


def openvino_engine(onnx_path: Path, batches: Batches, threads: int, texts: list[str], int8: bool) -> Embed:
    """OpenVINO bf16 (its precision hint), or int8 from NNCF's post-training quantization (ImportError without nncf)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(onnx_path))
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if not int8:
        compiled = core.compile_model(model, "CPU", {**config, "INFERENCE_PRECISION_HINT": "bf16"})
    else:
        import nncf

        calib = []
        batches.run(texts[:96], lambda feed: calib.append(dict(feed)) or np.zeros((len(feed["input_ids"]), 1, 1)))
        q_model = nncf.quantize(
            model, nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib)
        )
        compiled = core.compile_model(q_model, "CPU", config)
    return lambda t: batches.run(t, lambda feed: compiled(feed)[0])


def ctranslate2_engine(folder: Path, batches: Batches, threads: int, work: Path) -> Embed:
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

    return lambda t: batches.run(t, forward)


ENGINES = (
    "bertkit auto",
    "bertkit SentenceTransformer auto",
    "bertkit bf16",
    "bertkit fp32",
    "bertkit int8",
    "sentence-transformers fp32",
    "sentence-transformers bf16",
    "ONNX Runtime fp32",
    "ONNX Runtime int8 per-channel",
    "OpenVINO bf16",
    "OpenVINO + NNCF int8",
    "CTranslate2 int8",
)


def build_engine(name: str, folder: Path, texts: list[str], args: argparse.Namespace, work: Path) -> Embed:
    """The one engine ``name``, behind a ``texts -> (n, 384) unit vectors`` call (ImportError: not installed)."""
    if name.startswith("bertkit SentenceTransformer"):  # the drop-in class a sentence-transformers script imports
        from bertkit import SentenceTransformer

        model = SentenceTransformer(folder, dtype=name.split()[-1], device="cpu")
        return lambda t: model.encode(t, batch_size=args.batch_size, normalize_embeddings=True)
    if name.startswith("bertkit"):
        pipe = pipeline(
            "sentence-embedding", model=folder, dtype=name.split()[1], batch_size=args.batch_size, truncation="cut"
        )  # as sentence-transformers does
        return lambda t: pipe(t, return_tensors=True).float().numpy()
    if name.startswith("sentence-transformers"):
        import sentence_transformers

        st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
        if name.endswith("bf16"):
            st = st.to(torch.bfloat16)
        return lambda t: np.asarray(st.encode(t, batch_size=args.batch_size, normalize_embeddings=True), np.float32)
    batches = Batches(folder, args.batch_size)
    if name == "CTranslate2 int8":
        return ctranslate2_engine(folder, batches, args.threads, work)
    onnx_path = work / "minilm.onnx"  # exported once by the parent
    if name.startswith("ONNX Runtime"):
        return onnxruntime_engine(onnx_path, batches, args.threads, work, int8="int8" in name)
    return openvino_engine(onnx_path, batches, args.threads, texts, int8="int8" in name)


def _vectors_file(work: Path, name: str) -> Path:
    return work / ("".join(c if c.isalnum() else "-" for c in name) + ".npy")


def serve_engine(name: str, args: argparse.Namespace, work: Path) -> int:
    """A child process with one engine: warm-up, vectors to ``work``, then one timed pass per ``run`` line."""
    torch.set_num_threads(args.threads)
    folder = asset_path("minilm")
    texts = load_texts(args.sentences)
    try:
        fn = build_engine(name, folder, texts, args, work)
    except ImportError as e:
        print(f"skip: not installed ({e}); pip install 'bertkit[bench]'", flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - a conversion that fails here is reported, the others still run
        print(f"skip: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        return 0
    # warm-up: one-time graph and kernel set-up is not what a server pays per request
    np.save(_vectors_file(work, name), np.asarray(fn(texts), dtype=np.float32))
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.perf_counter()
        fn(texts)
        print(time.perf_counter() - t0, flush=True)
    return 0


def _reply(proc: subprocess.Popen) -> str:
    """The child's next line of its protocol (library output on its stdout is skipped)."""
    for line in proc.stdout:  # type: ignore[union-attr]
        line = line.strip()
        if line == "ready" or line.startswith("skip:"):
            return line
        try:
            float(line)
            return line
        except ValueError:
            continue
    raise RuntimeError(f"engine process exited with code {proc.wait()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=[], help="keep the engines whose name contains one of these")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between passes, so no pool spins into the next")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one engine's process
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return serve_engine(args.child, args, Path(args.work))
    torch.set_num_threads(args.threads)
    folder = asset_path("minilm")
    texts = load_texts(args.sentences)
    flags = cpu_flags()
    print(
        f"CPU flags: {describe_cpu(flags)}; auto -> {resolve_dtype('auto', flags)}; {args.threads} threads; "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    names = [n for n in ENGINES if not args.only or any(o.lower() in n.lower() for o in args.only)]
    procs: dict[str, subprocess.Popen] = {}
    with tempfile.TemporaryDirectory(prefix="engines-") as work:
        if any(n.startswith(("ONNX", "OpenVINO")) for n in names):
            try:
                export_onnx(folder, Path(work))
            except Exception as e:  # noqa: BLE001 - a missing exporter dependency leaves out the ONNX-based engines
                print(f"  (skipped) ONNX export failed ({type(e).__name__}: {e}); ONNX Runtime and OpenVINO left out")
                names = [n for n in names if not n.startswith(("ONNX", "OpenVINO"))]
        child = [sys.executable, __file__, "--sentences", str(args.sentences), "--batch-size", str(args.batch_size)]
        child += ["--threads", str(args.threads), "--work", work]
        try:
            for name in names:  # one at a time, so conversions and warm-ups do not share the cores
                proc = subprocess.Popen(
                    [*child, "--child", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
                )
                reply = _reply(proc)
                if reply == "ready":
                    procs[name] = proc
                else:
                    print(f"  (skipped) {name}: {reply[len('skip: ') :]}")
                    proc.wait()
            times: dict[str, list[float]] = {k: [] for k in procs}
            order = list(procs)
            # Passes interleaved, alternating in order so drift hits all alike; each starts --pause seconds
            # after the one before, as thread pools (ONNX Runtime, OpenMP, TBB) spin for a while after a pass.
            for r in range(args.repeats):
                for name in order if r % 2 == 0 else reversed(order):
                    time.sleep(args.pause)
                    procs[name].stdin.write("run\n")  # type: ignore[union-attr]
                    times[name].append(float(_reply(procs[name])))
            vecs = {k: np.load(_vectors_file(Path(work), k)) for k in procs}
        finally:
            for proc in procs.values():
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # type: ignore[union-attr]
                proc.wait()
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = next(vecs[k] for k in ("sentence-transformers fp32", "bertkit fp32", *vecs) if k in vecs)
    counter = Batches(folder, args.batch_size).tok
    counter.no_padding()  # tokenizer.json pads to a fixed length; count the real tokens only
    real_tokens = sum(len(e.ids) for e in counter.encode_batch(texts))
    print(
        f"{len(texts)} polarity sentences, {real_tokens:,} real tokens, batch {args.batch_size}, each engine in a "
        f"process of its own, median of {args.repeats} interleaved passes {args.pause:g} s apart; "
        "cosine against sentence-transformers fp32"
    )
    print(f"  {'engine':<34s} {'real tokens/s':>14s} {'ms/pass':>9s} {'min cos':>9s} {'mean cos':>9s}")
    for k in sorted(med, key=lambda k: med[k]):
        cos = (vecs[k] / np.linalg.norm(vecs[k], axis=1, keepdims=True) * ref).sum(1)
        label = f"{k} ({resolve_dtype('auto', flags)})" if k == "bertkit auto" else k
        print(
            f"  {label:<34s} {real_tokens / med[k]:>14,.0f} {med[k] * 1000:>9.0f} {cos.min():>9.5f} {cos.mean():>9.5f}"
        )
    for a, b, target in (
        ("bertkit auto", "OpenVINO bf16", ">= 1.5x"),
        ("bertkit auto", "sentence-transformers bf16", ">= 2.5x"),
        ("bertkit SentenceTransformer auto", "sentence-transformers bf16", ">= 2.5x, the drop-in class"),
        ("bertkit fp32", "ONNX Runtime fp32", ">= 1.3x"),
        ("bertkit int8", "bertkit bf16", "> 1x on a CPU with AMX-INT8 or VNNI"),
    ):
        if a in med and b in med:
            print(f"ratio {a} / {b}: {med[b] / med[a]:.2f}x (target {target})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
