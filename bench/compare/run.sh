#!/bin/bash
# Speed side by side (see bench/compare/run.py --help). Runs from the repository root with heed's venv:
#   bash bench/compare/run.sh --peers-dir /work/peers --steps 1000
set -eu
cd "$(dirname "$0")/../.."
exec "${HEED_PYTHON:-.venv/bin/python}" bench/compare/run.py "$@"
