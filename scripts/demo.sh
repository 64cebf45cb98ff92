#!/usr/bin/env bash
# `make demo`: a real agent task in a throwaway git repo, then the task's own check.
# The model is the default one (Qwen2.5-Coder-0.5B, pulled by `make demo`) unless DEMO_MODEL
# names another (e.g. DEMO_MODEL=embedded, the 135M SmolLM2: fast, but it fails these tasks);
# DEMO_TASK picks one of the eval tasks (agent/eval/tasks/). The demo shows what the agent did:
# its reply (with the default "whole" edit format a changed file is written from the code block
# under its path), its commits, the diff, tok/s, and whether the task's own check passes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.venv/bin"
MODEL="${DEMO_MODEL:-qwen2.5-coder-0.5b}"
TASK_NAME="${DEMO_TASK:-json_config}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/spec-agent-demo.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# The eval task's repository, instruction and check (the same ones `spec-agent eval` runs).
"$BIN/python" - "$TASK_NAME" "$WORK" <<'PY'
import sys
from pathlib import Path
from agent.eval.tasks import load_tasks, make_repo
task = load_tasks(names=[sys.argv[1]])[0]
work = Path(sys.argv[2])
make_repo(task, work / "repo")
(work / "instruction.txt").write_text(task.instruction)
PY
REPO="$WORK/repo"
TASK="$(cat "$WORK/instruction.txt")"
echo "== sample repo: $REPO (eval task $TASK_NAME)"
echo "== task: $TASK"
echo "== spec-agent -p ... -m $MODEL --yes --max-turns 4 --stats"
status=0
"$BIN/spec-agent" -p "$TASK" -C "$REPO" -m "$MODEL" --yes --max-turns 4 --max-tokens 256 \
  --stats 2>&1 || status=$?
echo "== exit code: $status"
echo "== git log"
git -C "$REPO" log --format='%h %an: %s%n%w(0,4,4)%b' | sed '/^\s*$/d'
echo "== changes made by the agent (git diff initial..HEAD)"
ROOT="$(git -C "$REPO" rev-list --max-parents=0 HEAD)"
git -C "$REPO" --no-pager diff "$ROOT" HEAD
git -C "$REPO" diff --quiet "$ROOT" HEAD && echo "(no changes committed)"
echo "== uncommitted: $(git -C "$REPO" status --porcelain | wc -l) file(s)"
"$BIN/python" - "$TASK_NAME" "$REPO" "$ROOT" <<'PY'
import sys
from pathlib import Path
from agent.eval.tasks import check, load_tasks
task = load_tasks(names=[sys.argv[1]])[0]
ok, why = check(task, Path(sys.argv[2]), "", sys.argv[3])
print("== the task's check:", "PASS" if ok else f"FAIL ({why})")
PY
