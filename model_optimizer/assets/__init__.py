"""Files shipped inside the package: the small trained reference model.

``pydoc-qwen3/`` is a Qwen3-architecture model trained on the Python 3.11 docs (see its
README.md and the project README's section "The reference model"). It is the built-in default model for demos and tests.
"""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
REFERENCE_MODEL_NAME = "pydoc-qwen3"
REFERENCE_MODEL_DIR = ASSETS_DIR / REFERENCE_MODEL_NAME


def reference_model_path() -> Path:
    """The folder of the shipped reference model (config, safetensors, tokenizer).

    Raises ValueError if the weights are not installed, e.g. in a checkout made before the
    model was trained; ``scripts/install_reference_model.py`` installs them.
    """
    if not (REFERENCE_MODEL_DIR / "model.safetensors").is_file():
        raise ValueError(
            f"the reference model is not installed at {REFERENCE_MODEL_DIR}; train it with "
            "scripts/device/train_refmodel.sh and install it with scripts/install_reference_model.py"
        )
    return REFERENCE_MODEL_DIR
