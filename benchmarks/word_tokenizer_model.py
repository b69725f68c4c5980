"""A config-only model folder (dummy weights) plus a word-per-id tokenizer of its vocabulary.

    python3 benchmarks/word_tokenizer_model.py benchmarks/configs/qwen3-0.6b OUT_DIR

Without a tokenizer the server streams token ids but no text; with this one ("w0 w1 ...", one word
per id, WordLevel + whitespace split) the serving path does its real per-token work (detokenizing,
stop-string search) on dummy weights, as for a real checkpoint. The eos token is the config's.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def write(src: Path, out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    shutil.copy(src / "config.json", out / "config.json")
    vocab = {f"w{i}": i for i in range(config["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=None if eos is None else f"w{eos}")
    fast.save_pretrained(str(out))
    print(f"{out}: config.json and a {len(vocab)}-word tokenizer", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(Path(sys.argv[1]), Path(sys.argv[2]))
