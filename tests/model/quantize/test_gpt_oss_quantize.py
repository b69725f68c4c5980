"""`mopt quantize` on gpt-oss's released MXFP4 layout (models/gpt_oss.py): the folder holds the experts dequantized,
in the model dtype, in transformers' GptOss layout (stacked, transposed, gate/up interleaved, with their biases;
the router and its bias under `mlp.router`), the mxfp4 quantization_config replaced by compressed-tensors'; our
engine reads it to the tokens it gives on the MXFP4 source rounded the same way at load, and transformers to
our engine's logits on that source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main
from tests import tiny_checkpoints as tiny

pytestmark = pytest.mark.slow  # each case quantizes, evaluates and loads the folder several times

SMALL = ["--num-eval-samples", "2", "--eval-seq-len", "32", "--device", "cpu"]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = [[5, 6, 7], list(range(10, 40))]
WINDOW = list(range(5, 37))


@pytest.fixture(scope="module")
def mxfp4(tiny_model, tmp_path_factory) -> tuple[Path, Path]:
    """(the MXFP4 folder, the float folder of the values its blocks mean, dequantized by transformers)."""
    root = tmp_path_factory.mktemp("gpt_oss_mxfp4_quantize")
    out = tiny.build_mxfp4_checkpoint(tiny_model("gpt_oss"), root / "mxfp4", reference_dir=root / "dequantized")
    return out, root / "dequantized"


def _quantize(source: Path, method: str, out: Path) -> Path:
    group = ["--group-size", "32"] if method == "rtn-int4" else []  # the tiny layers are 64 wide
    assert main(["quantize", str(source), "--method", method, "--output", str(out), *group, *SMALL]) == 0
    return out


def _tokens(folder: Path, quantization: str | None = None) -> list[list[int]]:
    llm = LLM(str(folder), dtype="float32", quantization=quantization, kv_cache_memory=1 << 22)
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]


@pytest.mark.parametrize("method", ["int8", "fp8", "rtn-int4", "int8-w8a8"])
def test_mxfp4_source_is_written_dequantized_in_transformers_layout(mxfp4, tmp_path, method):
    """The folder is, tensor for tensor, the one quantizing the float folder of the same values (transformers'
    dequantization) writes, whose experts, biases, router and sinks are those values; the engine's tokens on it
    are those of the MXFP4 source rounded at load (rtn-int4: the engine rounds at load in groups of 128, wider
    than these layers, and the tensor equality stands for it)."""
    from compressed_tensors.quantization import QuantizationConfig

    source, dequantized = mxfp4
    out = _quantize(source, method, tmp_path / "q")
    written = load_file(str(out / "model.safetensors"))
    assert not any(n.endswith(("_blocks", "_scales")) for n in written)
    from_float = load_file(str(_quantize(dequantized, method, tmp_path / "from_float") / "model.safetensors"))
    assert written.keys() == from_float.keys()
    assert all(torch.equal(written[n], from_float[n]) for n in written)
    quantized = {n.rsplit(".", 1)[0] for n in written if n.endswith(".weight_scale")}
    assert {n.rsplit(".", 1)[-1] for n in quantized} == {"q_proj", "k_proj", "v_proj", "o_proj"}
    for key, tensor in load_file(str(dequantized / "model.safetensors")).items():
        if key.removesuffix(".weight") not in quantized:
            assert torch.equal(written[key], tensor), key
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors"
    QuantizationConfig.model_validate(config)
    assert config["ignore"] == ["lm_head", "re:.*\\.experts(\\..*)?$", "re:.*\\.router$"]
    if method != "rtn-int4":
        assert _tokens(out) == _tokens(source, method)
    report = json.loads((out / "quantization_report.json").read_text())
    assert report["method"] == method and report["gate"]["passed"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("method", ["int8", "fp8"])
def test_transformers_reads_the_folder_as_our_engine_reads_the_source(mxfp4, tmp_path, method):
    """transformers' GptOss loads the folder with a plain from_pretrained (its experts are stacked as transformers
    keeps them, unlike the per-expert tensors of other families, which its int8 loader cannot fuse) and gives
    our engine's logits on the MXFP4 source rounded the same way at load (fp8: activations rounded per token by
    both): the experts, their biases and the router are written where and how transformers reads them. And
    --eval-only takes the MXFP4 folder as the original it was made from."""
    from transformers import AutoModelForCausalLM

    from model_optimizer.model.quantize.forward import window_logits
    from model_optimizer.runtime.models.loader import load_model

    source, _ = mxfp4
    out = _quantize(source, method, tmp_path / "q")
    hf = AutoModelForCausalLM.from_pretrained(
        str(out), dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([WINDOW])).logits[0].float()
    cpu = torch.device("cpu")
    ours = window_logits(load_model(source, "float32", cpu, quantization=method), WINDOW, cpu)
    torch.testing.assert_close(ours, theirs, atol=2e-3, rtol=1e-3)
    assert main(["quantize", "--eval-only", str(out), "--reference", str(source), *SMALL]) == 0
