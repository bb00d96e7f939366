#!/usr/bin/env bash
# Create .venv and install hangwatch with what the demo and the tests need.
# Idempotent: a second run only checks. Override the torch requirement with
# HANGWATCH_TORCH_SPEC (default: the CPU build the demo and tests were run with).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "${HANGWATCH_TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q -e '.[generator,trl,test]'
.venv/bin/hangwatch --help >/dev/null
echo "hangwatch installed in .venv"
