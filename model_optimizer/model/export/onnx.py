"""Export an embedding model to ONNX (dynamic batch and sequence axes) and check it against our engine.

The exported graph is the whole recipe, not just the transformer: `input_ids` and
`attention_mask` (batch, sequence), padded on either side, in; `sentence_embedding` (batch, hidden)
out, pooled and normalized as the Embedder does. Positions and the first or last token are read from
the mask, not assumed: the tokenizer is saved as the model ships it, and some pad on the left
(Qwen3-Embedding's does), as may a user's own padding code. Users get
one file that needs only onnxruntime and the tokenizer saved beside it. Encoders and decoder
embedders both export; for a decoder, feed the ids the Embedder would read (its end token
appended, which Qwen3-Embedding's own tokenizer already does).

    mopt export-onnx --model all-MiniLM-L6-v2 --output minilm-onnx/
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.common.fileio import current_umask, publish_dir, run_lock, staging_dir
from model_optimizer.common.processes import interrupts_deferred
from model_optimizer.runtime.embed import Embedder
from model_optimizer.runtime.embed.varlen_attention import PaddedMeta

INPUT_NAMES = ["input_ids", "attention_mask"]
OUTPUT_NAME = "sentence_embedding"
CHECK_TEXTS = [
    "a",
    "Hello, world!",
    "naïve café — déjà vu",
    "日本語のテキスト",
    "!!! ??? ...",
    "ONNX export with dynamic batch and sequence axes, checked against the engine. " * 4,
]


@dataclass
class ExportReport:
    onnx_path: str
    opset: int
    num_texts: int
    max_abs_diff: float
    """Largest |onnxruntime - engine| over every embedding element."""
    min_cosine: float
    """Smallest cosine similarity between the two embeddings of one text."""


class PaddedEmbedder(nn.Module):
    """Backbone, pooling and normalization over a padded (batch, seq) batch, for export; padding on the
    left or the right gives the same vectors."""

    def __init__(self, embedder: Embedder) -> None:
        super().__init__()
        self.backbone = embedder.backbone
        self.pooling, self.normalize = embedder.pooling, embedder.normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        batch, seq = input_ids.shape
        # each text's own positions from 0, wherever its padding is (pads get a harmless 0)
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        meta = PaddedMeta(batch, seq, attention_mask)
        hidden = self.backbone(input_ids.reshape(-1), positions.reshape(-1), meta).reshape(batch, seq, -1)
        pooled = self._pool(hidden.float(), attention_mask.to(torch.float32))
        return F.normalize(pooled, p=2.0, dim=-1) if self.normalize else pooled

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(dim=1, keepdim=True)  # (batch, 1)
        if self.pooling in ("cls", "last"):
            if self.pooling == "cls":
                index = mask.argmax(dim=1)  # the first real token (argmax takes the first of equal values)
            else:  # the last real token: the largest position that the mask keeps
                index = (mask * torch.arange(mask.shape[1], device=mask.device)).argmax(dim=1)
            index = index[:, None, None].expand(-1, 1, hidden.shape[-1])
            return hidden.gather(1, index).squeeze(1)
        if self.pooling == "max":
            return hidden.masked_fill(mask[:, :, None] == 0, float("-inf")).amax(dim=1)
        sums = (hidden * mask[:, :, None]).sum(dim=1)
        return sums / (lengths.sqrt() if self.pooling == "mean_sqrt_len" else lengths)


def padded_batch(embedder: Embedder, texts: list[str], side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask, padded on `side` ("right" or "left"), from exactly the ids the
    engine reads (instruction, end token and truncation applied)."""
    ids = embedder.inputs.token_ids(list(texts), embedder.max_seq_length, None)
    width = max(len(t) for t in ids)
    input_ids = torch.zeros(len(ids), width, dtype=torch.int64)
    mask = torch.zeros(len(ids), width, dtype=torch.int64)
    for row, tokens in enumerate(ids):
        span = slice(0, len(tokens)) if side == "right" else slice(width - len(tokens), width)
        input_ids[row, span] = torch.tensor(tokens)
        mask[row, span] = 1
    return input_ids, mask


def export_onnx(embedder: Embedder, onnx_path: Path, opset: int = 17) -> None:
    """Write the padded encoder graph to `onnx_path` (atomically: temp file, then rename)."""
    wrapper = PaddedEmbedder(embedder).eval()
    args = tuple(t.to(embedder.device) for t in padded_batch(embedder, ["an example input", "a second, longer one"]))
    dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic[OUTPUT_NAME] = {0: "batch"}
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=onnx_path.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # The tracer warns on each Python branch on a shape, such as attention's `kv_heads != heads`.
            # Those are head counts and sizes fixed by the model, the same for every input, so the traced
            # branch is the right one; the warning would only alarm users on every export.
            warnings.filterwarnings(
                "ignore", message="Converting a tensor to a Python boolean", category=torch.jit.TracerWarning
            )
            torch.onnx.export(
                wrapper,
                args,
                tmp,
                input_names=INPUT_NAMES,
                output_names=[OUTPUT_NAME],
                dynamic_axes=dynamic,
                opset_version=opset,
                dynamo=False,
            )
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes it private; the result is an ordinary file
        os.replace(tmp, onnx_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_tokenizer(embedder: Embedder, folder: Path) -> None:
    """The model's tokenizer files, told the graph's inputs and the engine's length limit in
    tokenizer_config.json: `tokenizer(texts, truncation=True)` then cuts where the engine (and
    sentence-transformers) do, not at the tokenizer's own model_max_length (512 for all-MiniLM-L6-v2,
    whose vectors are made from at most 256 tokens), and returns only the inputs the graph takes (a BERT
    tokenizer's token_type_ids is an input onnxruntime refuses)."""
    embedder.tokenizer.save_pretrained(str(folder))
    path = folder / "tokenizer_config.json"
    if not path.is_file():  # transformers writes one for every tokenizer it saves; no other is invented
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(model_max_length=embedder.max_seq_length, model_input_names=INPUT_NAMES)
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def check_onnx(embedder: Embedder, onnx_path: Path, texts: list[str], opset: int) -> ExportReport:
    """Run the exported file in onnxruntime on `texts` and compare with the engine: in two batches of
    different batch and sequence sizes, each padded on the right and again on the left (tokenizers pad
    either way), so a graph wrong for either padding fails the check. The report holds the worst case."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    halves = [part for part in (texts[: len(texts) // 2], texts[len(texts) // 2 :]) if part]
    expected = embedder.encode(texts, truncate_prompt_tokens=-1).embeddings
    max_abs_diff, min_cosine = 0.0, 1.0
    for side in ("right", "left"):
        outputs = []
        for part in halves:
            feeds = dict(zip(INPUT_NAMES, (t.numpy() for t in padded_batch(embedder, part, side))))
            outputs.append(torch.from_numpy(session.run([OUTPUT_NAME], feeds)[0]))
        got = torch.cat(outputs).float()
        max_abs_diff = max(max_abs_diff, float((got - expected).abs().max()))
        min_cosine = min(min_cosine, float(F.cosine_similarity(got, expected, dim=-1).min()))
    return ExportReport(
        onnx_path=str(onnx_path), opset=opset, num_texts=len(texts), max_abs_diff=max_abs_diff, min_cosine=min_cosine
    )


def export_folder(
    embedder: Embedder, out_dir: Path, opset: int = 17, check_texts: list[str] | None = None
) -> ExportReport:
    """out_dir/model.onnx, the tokenizer files beside it, and export_report.json with the check.

    Built in a staging folder and moved in when the check is done, so a failed or interrupted export
    leaves no half-written file: a new out_dir is built beside it and renamed into place whole; an
    existing one (a mount point, files of the user's) stages inside itself, so that every rename stays
    on its file system, and gets each file by rename, its old report removed first and the new one
    moved last: a report is there only beside the files it checked. One export at a time per out_dir: two
    moving their files into one folder would leave it half of each."""
    existing = out_dir.is_dir()
    with run_lock(_lock_path(out_dir, existing), out_dir, "mopt export-onnx"):
        return _export_folder(embedder, out_dir, existing, opset, check_texts)


def _lock_path(out_dir: Path, existing: bool) -> Path:
    """Where an export's lock is: inside an existing folder (its parent may be a mount's, not ours to write),
    else beside the new one, where its staging folder goes (a run that finds the folder made by one that
    finished takes the other lock, with nothing left to race)."""
    return out_dir / ".mopt-export.lock" if existing else out_dir.with_name(f".{out_dir.name}.lock")


def _export_folder(
    embedder: Embedder, out_dir: Path, existing: bool, opset: int, check_texts: list[str] | None
) -> ExportReport:
    staging: Path | None = None
    try:
        with interrupts_deferred():  # a Ctrl-C as the folder appears finds `staging` set: it is removed
            staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=".export-tmp-")) if existing else staging_dir(out_dir)
        onnx_path = staging / "model.onnx"
        export_onnx(embedder, onnx_path, opset)
        save_tokenizer(embedder, staging)
        report = check_onnx(embedder, onnx_path, check_texts or CHECK_TEXTS, opset)
        report.onnx_path = str(out_dir / "model.onnx")
        (staging / "export_report.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
        with interrupts_deferred():  # the moves finish: never a folder half of the old files and half new
            if not existing:
                publish_dir(staging, out_dir)
                return report
            (out_dir / "export_report.json").unlink(missing_ok=True)
            umask = current_umask()
            names = sorted(p.name for p in staging.iterdir() if p.name != "export_report.json")
            for name in [*names, "export_report.json"]:
                os.chmod(staging / name, 0o666 & ~umask)
                os.replace(staging / name, out_dir / name)
        return report
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
