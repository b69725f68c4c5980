#!/usr/bin/env bash
# Fill .whl/ (git-ignored; carry it to the GPU machine) with the wheels that machine lacks: the shared ones
# (fastapi, uvicorn, pydantic, optuna and their needs) and those this package adds (the engine core's
# msgspec and pyzmq, llguidance for structured outputs, jsonschema for the structured GPU tests,
# pytest-timeout for gpu_tests_h200.sh, py-spy for the profiles), for the GPU machine's CPython 3.12 on x86-64.
# Run here, where the package index is reachable:
#   bash scripts/device/wheels.sh [SHARED_DIR]     (default ../shared/device-wheels)
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${1:-../shared/device-wheels}
mkdir -p .whl
if ls "$shared"/*.whl > /dev/null 2>&1; then cp "$shared"/*.whl .whl/; fi
pip=${PIP:-.venv/bin/pip}
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
           --platform manylinux_2_31_x86_64)
"$pip" download -q --only-binary=:all: --no-deps --python-version 3.12 "${platforms[@]}" -d .whl \
  msgspec pyzmq "llguidance>=1.9" jsonschema jsonschema-specifications referencing rpds-py attrs pytest-timeout py-spy
ls .whl | wc -l
