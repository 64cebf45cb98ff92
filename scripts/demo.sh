#!/usr/bin/env bash
# `make demo`: a real agent task with the embedded model (SmolLM2-135M) in a throwaway git repo.
# The model is tiny, so it may well not solve the task; the demo shows what it did: its tool
# calls (decoded under the tool-call grammar), the commits it made, the diff, and tok/s.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.venv/bin"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/spec-agent-demo.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

git -C "$WORK" init -q -b main
git -C "$WORK" config user.name "Demo User"
git -C "$WORK" config user.email "demo@example.com"
cat > "$WORK/calc.py" <<'PY'
def add(a, b):
    return a + b


def mul(a, b):
    return a * b
PY
printf '# calc\n\nTiny arithmetic helpers.\n' > "$WORK/README.md"
git -C "$WORK" add -A && git -C "$WORK" commit -q -m "initial"

TASK="Use edit_file to add a docstring to the function add in calc.py."
echo "== sample repo: $WORK"
echo "== task: $TASK"
echo "== spec-agent -p ... --yes --max-turns 3 --tool-choice required --stats"
status=0
"$BIN/spec-agent" -p "$TASK" -C "$WORK" --yes --max-turns 3 --max-tokens 192 \
  --tool-choice required --stats 2>&1 || status=$?
echo "== exit code: $status"
echo "== git log"
git -C "$WORK" log --format='%h %an: %s%n%w(0,4,4)%b' | sed '/^\s*$/d'
echo "== changes made by the agent (git diff initial..HEAD)"
ROOT="$(git -C "$WORK" rev-list --max-parents=0 HEAD)"
git -C "$WORK" --no-pager diff "$ROOT" HEAD
git -C "$WORK" diff --quiet "$ROOT" HEAD && echo "(no changes committed)"
echo "== uncommitted: $(git -C "$WORK" status --porcelain | wc -l) file(s)"
