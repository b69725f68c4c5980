"""What one `mopt quantize` run is given and hands back, shared by the generation and the embedding
pipelines (pipeline.py, embed_pipeline.py): options, progress callbacks, the gate's refusal, the
report's name, the output checks, rounding a loaded model in place and publishing the folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import torch

from model_optimizer.common.fileio import (
    atomic_write,
    current_umask,
    is_staging_dir_of,
    publish_dir,
    run_lock,
    staging_dir,
)
from model_optimizer.common.processes import interrupts_deferred
from model_optimizer.runtime.layers.quantization.spec import INT4_METHODS

REPORT_NAME = "quantization_report.json"
SHAPE_KEYS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "q_lora_rank",
    "kv_lora_rank",
    "type_vocab_size",
)
"""config.json fields that fix a checkpoint's tensor shapes and vocabulary: a quantized folder and its
original agree on every one that both state."""


INT4_OF_ANOTHER_TOOL = "int4 (compressed-tensors)"
"""--eval-only's method for a compressed-tensors int4 folder without a report of ours: its layout does
not say whether the weights were rounded to nearest or searched (AWQ, GPTQ), so it claims neither."""
INT4_REPORTED = (*INT4_METHODS, INT4_OF_ANOTHER_TOOL)
"""Methods whose report states the int4 group size."""


@dataclass
class QuantizeOptions:
    model: Path
    method: str
    output: Path
    calib: str | None = None
    num_calib_samples: int = 128
    calib_seq_len: int = 512
    eval_text: str | None = None
    num_eval_samples: int = 32
    eval_seq_len: int = 512
    group_size: int = 128
    max_ppl_increase: float | None = None
    min_top1: float | None = None
    min_cosine: float | None = None
    """Embedding models: refuse a mean cosine to the original vectors below this (None: the default)."""
    device: str = "auto"
    eval_dtype: str = "auto"


@dataclass
class Progress:
    """Callbacks for a progress display: start(task, total) then advance(task) per unit; warn(text) for a
    caveat the user should read beside the figures (too little calibration or evaluation text)."""

    start: Callable[[str, int], None] = lambda task, total: None
    advance: Callable[[str], None] = lambda task: None
    warn: Callable[[str], None] = lambda text: None


class GateFailed(Exception):
    def __init__(self, failures: list[str], report: dict) -> None:
        super().__init__("; ".join(failures))
        self.failures, self.report = failures, report


def absolute_output(output: Path) -> Path:
    """`output` made absolute and normalised: `--output .` (the current folder, which may be the empty
    folder to fill) or `out/..` has no name to put the lock and staging folder beside."""
    return Path(os.path.abspath(output))


def check_output(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"output {output} already exists and is not an empty folder; pick a new path")


def check_int4_groups(model: Path, method: str, group_size: int) -> None:
    """Before any work: the int4 group rule (a multiple of 8 that divides the input size of every layer
    rounded), checked as rounding checks it, on a copy of the model built on the meta device (no memory,
    no weights read); for awq, the layer layout it supports too. Otherwise both are refused only after
    the load, the calibration text's tokenization and, for a bad size, in the AWQ search."""
    if method not in INT4_METHODS:
        return
    from model_optimizer.model.inspect.consumption import private_meta_model
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization
    from model_optimizer.runtime.layers.quantization.spec import QuantSpec
    from model_optimizer.runtime.models.model_config import read_config

    skeleton = private_meta_model(read_config(model))  # as inspect builds it: attaching edits its own copy
    if method == "awq":  # the layout AWQ folds its scales into comes first: a group size cannot fix that
        from model_optimizer.model.quantize.awq import check_awq_layout

        check_awq_layout(skeleton)
    try:
        attach_quantization(skeleton, QuantSpec(method, group_size=group_size), torch.float32, dummy=True)
    except ValueError as exc:
        raise ValueError(f"--group-size {group_size}: {exc}") from None


def check_reference(folder: Path, reference: Path) -> None:
    """ValueError unless `reference` can be the original of the quantized `folder`: the same
    architecture, and the same shapes and vocabulary wherever both config.json files state them. An
    unrelated model would otherwise be scored (a meaningless top-1 agreement that a loose gate passes)
    and its name written over the folder's report. A reference in a format its model dequantizes at load
    (gpt-oss's MXFP4 experts) is an original: `mopt quantize` takes it as one."""
    from model_optimizer.runtime.layers.quantization.spec import stored_quantization
    from model_optimizer.runtime.models.model_config import read_config

    quantized, original = read_config(folder), read_config(reference)
    if stored_quantization(original):
        raise ValueError(f"--reference {reference} is itself quantized; give the original float folder")
    differences = [
        f"{key} {quantized[key]!r} vs {original[key]!r}"
        for key in ("architectures", *SHAPE_KEYS)
        if key in quantized and key in original and quantized[key] != original[key]
    ]
    if differences:
        raise ValueError(
            f"--reference {reference} is not the original of {folder}: their config.json differ in "
            f"{'; '.join(differences)} (quantized vs reference); give the float folder it was made from"
        )


def folder_report(folder: Path, spec) -> dict | None:
    """The folder's own quantization_report.json (the one `mopt quantize` wrote) when it describes the
    weights the folder's config.json declares (`spec`, a QuantSpec): the same method, or for a
    compressed-tensors int4 folder an int4 method with the same group size. None when absent, not JSON,
    or about other weights."""
    try:
        report = json.loads((folder / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    method = report.get("method") if isinstance(report, dict) else None
    if spec.source == "compressed-tensors" and spec.method == "rtn-int4":
        ok = method in INT4_REPORTED and report.get("group_size") == spec.group_size
    else:
        ok = method == spec.method
    return report if ok else None


def folder_method(folder: Path, spec) -> str:
    """The method --eval-only reports for a quantized folder: its own report's (our AWQ folder stays awq),
    else what config.json says, except that a compressed-tensors int4 layout names no method
    (INT4_OF_ANOTHER_TOOL)."""
    report = folder_report(folder, spec)
    if report is not None:
        return report["method"]
    if spec.source == "compressed-tensors" and spec.method == "rtn-int4":
        return INT4_OF_ANOTHER_TOOL
    return spec.method


def write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def checkpoint_dtype(model: Path, config: dict) -> torch.dtype:
    """The dtype the checkpoint in `model` stores its weights in, which the quantized folder keeps for
    what it does not quantize (embeddings, norms, lm_head): config.json's torch_dtype, else the float
    dtype most linear weights have in the safetensors headers (inspect --fix's rule, main_dtype). A
    bf16 checkpoint saved without a dtype would otherwise be written in float32, larger than it was."""
    from model_optimizer.model.inspect.checkpoint import read_checkpoint
    from model_optimizer.model.inspect.fix import main_dtype
    from model_optimizer.runtime.models.loader import DTYPES

    name = config.get("torch_dtype") or config.get("dtype") or main_dtype(read_checkpoint(model))
    return DTYPES.get(str(name).replace("torch.", ""), torch.float32)


def exact_load_dtype(model: Path) -> str:
    """The dtype that holds every float tensor of the checkpoint in `model` as it is stored: its one float
    dtype, else float32 (bfloat16 beside float16 or float32). The quantizers compute in float32 from it, so a
    bf16 checkpoint loaded in bf16 rounds exactly as loaded in float32, in half the memory."""
    from model_optimizer.model.inspect.checkpoint import read_checkpoint
    from model_optimizer.runtime.models.loader import DTYPES

    floats = {info.dtype_name for info in read_checkpoint(model).tensors if info.dtype_name in DTYPES}
    return floats.pop() if len(floats) == 1 else "float32"


def round_in_place(model: torch.nn.Module, opts: QuantizeOptions, target: torch.dtype, progress: Progress) -> None:
    """Give every linear the method's weights, rounded from the float ones, and cast the rest to `target`."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization
    from model_optimizer.runtime.layers.quantization.spec import QuantSpec

    layers = attach_quantization(model, QuantSpec(opts.method, group_size=opts.group_size), target, dummy=True)
    progress.start("rounding", len(layers))
    with torch.no_grad():
        for _, layer in layers:
            layer.quant_method.process_weights_after_loading(layer)
            progress.advance("rounding")
        for param in model.parameters():
            param.data = param.data.to(target)


def output_lock(output: Path) -> AbstractContextManager[None]:
    """Hold `.<output>.lock` for the run (common.fileio.run_lock; hidden, as the staging folder is, so
    that it cannot be taken for a user's file of that name)."""
    return run_lock(output.with_name(f".{output.name}.lock"), output, "mopt quantize")


def publish(output: Path, build: Callable[[Path], dict], warn: Callable[[str], None] = lambda text: None) -> dict:
    """Build the folder under a temporary name beside `output` (`build(tmp)` writes it and returns its
    report), then, unless the report's gate failed (GateFailed), write the report and rename the folder
    to `output` (or move its files into `output` when that is an existing empty folder:
    fill_empty_folder): a failed or interrupted run leaves nothing behind. One run at a time per output
    (output_lock); the output is checked again once locked, as a run that held it may have just filled it,
    and what a killed run left is removed (remove_stale_staging, said through `warn`)."""
    output = absolute_output(output)
    with output_lock(output):
        check_output(output)
        for stale, error in remove_stale_staging(output):
            if error is None:
                warn(f"removed {stale}, the unfinished folder of an earlier run on this --output that was killed")
            else:  # someone else's (another user's run under sudo): this run needs it gone no more than before
                warn(f"could not remove {stale}, the unfinished folder of an earlier run on this --output: {error}")
        return _publish(output, build)


def remove_stale_staging(output: Path) -> list[tuple[Path, str | None]]:
    """Remove the staging folders (`.<output>.tmp-XXXXXXXX`) of runs on `output` that were killed outright
    (kill -9, the out-of-memory killer), which no clean-up could follow: each is a hidden, possibly whole,
    copy of the model. Called with the output's lock held, so no live run is building one of them. Only
    names staging_dir makes for `output` itself (fileio.is_staging_dir_of, as text: a glob with `[` in the
    name would match another output's folder). Returns each with None, or with why it could
    not be removed (it stays; the run goes on)."""
    stale = sorted(
        path
        for path in output.parent.iterdir()
        if is_staging_dir_of(path, output) and path.is_dir() and not path.is_symlink()
    )
    removed: list[tuple[Path, str | None]] = []
    for path in stale:
        try:
            shutil.rmtree(path)
            removed.append((path, None))
        except OSError as exc:
            removed.append((path, exc.strerror or str(exc)))
    return removed


def _publish(output: Path, build: Callable[[Path], dict]) -> dict:
    tmp = staging_dir(output)
    try:
        report = build(tmp)
        if report["gate"]["failures"]:
            raise GateFailed(report["gate"]["failures"], report)
        write_json(tmp / REPORT_NAME, report)
        try:
            with interrupts_deferred():  # the moves into `output` finish: never a half-filled folder
                if output.is_dir():
                    fill_empty_folder(tmp, output)
                else:
                    publish_dir(tmp, output)  # with the umask's modes: a server running as another user reads it
        except OSError:
            if not output.exists():
                raise
            # another run (or the user) filled `output` since check_output: neither result is thrown away
            kept = Path(tempfile.mkdtemp(dir=output.parent, prefix=f"{output.name}.kept-"))
            tmp.replace(kept)  # a rename onto the empty folder just made: no other run can take that name
            raise ValueError(
                f"--output {output} appeared while quantizing (another run?) and was left as it is; this "
                f"run's result is in {kept}"
            ) from None
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fill_empty_folder(tmp: Path, output: Path) -> None:
    """Move what `tmp` holds into `output`, an existing empty folder, with publish_dir's modes. Renaming
    `tmp` over it would unlink the folder itself: a shell inside it (`--output .`) would be left in a
    deleted folder, and a mount point (a container's volume) cannot be renamed over. OSError when
    something has appeared in `output` meanwhile."""
    if any(output.iterdir()):
        raise FileExistsError(output)
    umask = current_umask()
    for root, dirs, files in os.walk(tmp):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)
    for entry in sorted(tmp.iterdir(), key=lambda p: p.name == REPORT_NAME):  # the report last: a finished folder
        os.replace(entry, output / entry.name)
