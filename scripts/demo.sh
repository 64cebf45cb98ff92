#!/usr/bin/env bash
# `make demo`: a real non-interactive task with the embedded model.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "== spec-agent -p (embedded SmolLM2-135M, greedy) =="
$BIN/spec-agent -p "Write a Python function is_palindrome(s) that ignores case and spaces." \
  --max-tokens 160 --stats
