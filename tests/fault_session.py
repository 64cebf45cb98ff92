"""Test-only: one scripted full-auto session, for tests/test_faults.py to SIGKILL at random.

Usage: `python tests/fault_session.py REPO MARKER`. The session (the real conversation,
tools, sandbox, snapshots, auto-commits and saved conversation) edits a file, writes new
ones, runs shell commands (each carrying MARKER, so that a test can look for leftovers),
deletes a file and commits. It prints READY once imported, then works. Each path is
changed at most once (see FINAL), so a file is either as before or as the step left it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from scripted import ScriptedModel, call, full_auto  # noqa: E402

BIG = "".join(f"line {i}: {'x' * 60}\n" for i in range(1500))  # about 100 KB


def turns(marker: str) -> list[str]:
    return [
        call("edit_file", path="calc.py", edits=[{"old": "return a - b", "new": "return b - a"}]),
        call("write_file", path="notes.md", content="# notes\n" + "n" * 5000 + "\n"),
        call("run_shell", command=f"printf 'gen\\n' > gen.txt && sleep 0.3 # {marker}"),
        call("write_file", path="big.txt", content=BIG),
        call("run_shell", command=f"rm -f README.md && sleep 0.2 # {marker}"),
        call("run_shell", command=f"sleep 0.5 & sleep 0.4; echo done # {marker}"),
        "Done.",
    ]


def main() -> None:
    from agent.core.history import HistoryStore
    from agent.runtime import Runtime

    repo, marker = Path(sys.argv[1]), sys.argv[2]
    rt = Runtime(full_auto(attach_mentioned=False), repo, model=ScriptedModel(turns(marker)),
                 history=HistoryStore(repo), warn=lambda m: None)
    conv = rt.new_conversation()
    print("READY", flush=True)
    for _ in conv.send("tidy the repo"):
        pass
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main()
