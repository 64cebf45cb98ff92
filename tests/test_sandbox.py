"""The shell sandbox (tools/sandbox.py + run_shell): what a command may not touch, what it may,
that nothing it starts outlives it, and what happens without a sandbox (refusal, approvals).

The tests that run commands need a working bubblewrap (Linux; `.ci/run` installs it); the
rest (argv shape, the Seatbelt profile, fallbacks, approvals, config) run anywhere.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from scripted import git, git_repo  # noqa: F401 - fixture

from agent.core.approvals import decide
from agent.config import ConfigError, load_config
from tools import ToolContext, call_tool, sandbox

BWRAP_OK, BWRAP_WHY = sandbox.available() if sys.platform.startswith("linux") else (False, "not Linux")
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"no working bubblewrap: {BWRAP_WHY}")


@pytest.fixture
def ctx(git_repo) -> ToolContext:
    return ToolContext(git_repo, shell_timeout_s=10, in_git=True)


def sh(ctx: ToolContext, command: str, **args):
    return call_tool("run_shell", {"command": command, **args}, ctx)


def alive(marker: str) -> str:
    """Processes whose command line holds `marker` (pgrep -f), as text."""
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False).stdout.strip()


@pytest.fixture
def no_sandbox(monkeypatch):
    """Pretend no sandbox works here (bwrap missing)."""
    monkeypatch.setattr(sandbox, "available", lambda: (False, "bwrap not installed"))


# ---- what a sandboxed command cannot touch -----------------------------------------------------


@needs_bwrap
def test_home_and_etc_are_read_only(ctx, tmp_path, monkeypatch):
    home = tmp_path / "home"  # a real folder outside the repo, standing in for ~
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(home))
    marker, hosts = f"/etc/spec-agent-{uuid.uuid4().hex}", Path("/etc/hosts").read_bytes()
    r = sh(ctx, f'echo evil >> "$HOME/.bashrc"; touch "$HOME/.profile"; touch {marker}; echo x >> /etc/hosts')
    assert not r.ok and "Read-only file system" in r.output
    assert (home / ".bashrc").read_text() == "# mine\n" and not (home / ".profile").exists()
    assert not Path(marker).exists() and Path("/etc/hosts").read_bytes() == hosts


@needs_bwrap
def test_symlink_out_of_the_repo_does_not_help(ctx, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(home))
    r = sh(ctx, 'ln -s "$HOME/.bashrc" rc && echo evil >> rc')
    assert not r.ok and (home / ".bashrc").read_text() == "# mine\n"


@needs_bwrap
def test_writing_inside_the_repo_works(ctx):
    r = sh(ctx, "mkdir -p sub && echo made > sub/new.txt && cat sub/new.txt && pwd")
    assert r.ok and "made" in r.output and str(ctx.root.resolve()) in r.output
    assert (ctx.root / "sub/new.txt").read_text() == "made\n"


@needs_bwrap
def test_tmp_is_private(ctx):
    name = f"/tmp/spec-agent-{uuid.uuid4().hex}"
    r = sh(ctx, f"echo inside > {name} && cat {name} && echo $TMPDIR")
    assert r.ok and "inside" in r.output and "/tmp" in r.output
    assert not Path(name).exists()


# ---- git data ---------------------------------------------------------------------------------


@needs_bwrap
def test_git_folder_is_read_only(ctx):
    head = (ctx.root / ".git/HEAD").read_text()
    for command in ("rm -rf .git", "echo 'ref: refs/heads/evil' > .git/HEAD", "mv .git .git-old",
                    "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit"):
        assert not sh(ctx, command).ok, command
    assert (ctx.root / ".git/HEAD").read_text() == head
    assert not (ctx.root / ".git/hooks/pre-commit").exists() and not (ctx.root / ".git-old").exists()
    r = sh(ctx, "git log --oneline | head -1 && git status --short")  # reading git still works
    assert r.ok and r.output.count("\n") >= 2


@needs_bwrap
def test_git_file_and_separate_git_dir_are_read_only(tmp_path):
    root, meta = tmp_path / "wt", tmp_path / "meta"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(meta), str(root)], check=True)
    pointer = (root / ".git").read_text()
    ctx = ToolContext(root, shell_timeout_s=10, in_git=True)
    assert not sh(ctx, "echo 'gitdir: planted' > .git").ok  # a rewritten pointer → planted hooks
    assert not sh(ctx, f"touch {meta}/hooks/post-checkout").ok
    assert (root / ".git").read_text() == pointer and not (meta / "hooks/post-checkout").exists()
    assert sh(ctx, "echo ok > file.txt").ok


# ---- processes and time -----------------------------------------------------------------------


@needs_bwrap
def test_background_children_are_gone_when_the_call_returns(ctx):
    marker = f"{int(uuid.uuid4().int % 10**6) + 1000}.{os.getpid()}"
    r = sh(ctx, f"(sleep {marker}1 &); setsid sleep {marker}2 & nohup sleep {marker}3 >/dev/null 2>&1 & echo started")
    assert r.ok and "started" in r.output
    time.sleep(0.1)
    assert alive(f"sleep {marker}") == ""


@needs_bwrap
def test_timeout_kills_the_whole_sandbox(ctx):
    marker = f"{int(uuid.uuid4().int % 10**6) + 1000}.{os.getpid()}"
    t = time.monotonic()
    r = sh(ctx, f"sleep {marker}1 & setsid sleep {marker}2 & sleep 60; echo never", timeout_s=1)
    assert not r.ok and "timed out after 1s" in r.output and "never" not in r.output
    assert time.monotonic() - t < 5
    time.sleep(0.2)
    assert alive(f"sleep {marker}") == ""


# ---- network ----------------------------------------------------------------------------------


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    yield srv.getsockname()[1]
    srv.close()


def _connect(port: int) -> str:
    """A connection attempt with bash's /dev/tcp: no interpreter from a folder the sandbox
    hides (a checkout under /tmp has its venv there, and /tmp is private inside)."""
    return f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected'"


@needs_bwrap
def test_network_is_cut_by_default(ctx, listener):
    r = sh(ctx, _connect(listener))
    assert not r.ok and "connected" not in r.output.replace("Connection", "")
    assert "/dev/tcp" in r.output and "not found" not in r.output  # it tried, and failed


@needs_bwrap
def test_network_allowed_when_asked(git_repo, listener):
    ctx = ToolContext(git_repo, shell_timeout_s=10, in_git=True, allow_network=True)
    r = sh(ctx, _connect(listener))
    assert r.ok and "connected" in r.output


# ---- without a sandbox --------------------------------------------------------------------------


def test_no_sandbox_means_the_command_is_refused(ctx, no_sandbox):
    r = sh(ctx, "touch ran.txt")
    assert not r.ok and "no sandbox available (bwrap not installed)" in r.output
    assert not (ctx.root / "ran.txt").exists()


def test_sandbox_off_runs_unsandboxed(git_repo, tmp_path, no_sandbox):
    outside = tmp_path / "outside.txt"
    ctx = ToolContext(git_repo, shell_timeout_s=10, sandbox="off")
    assert sh(ctx, f"echo bare > {outside}").ok and outside.read_text() == "bare\n"


def test_full_auto_asks_without_a_sandbox(no_sandbox, git_repo):
    d = decide("full-auto", "shell", "run_shell", {"command": "ls"}, git_repo)
    assert d.ask and d.reason == "no sandbox available (bwrap not installed): shell commands need approval"
    assert not decide("full-auto", "edit", "write_file", {"path": "a"}, git_repo).ask
    assert decide("auto-edit", "shell", "run_shell", {"command": "ls"}, git_repo).ask


def test_full_auto_runs_sandboxed_commands_without_asking(monkeypatch, git_repo):
    monkeypatch.setattr(sandbox, "available", lambda: (True, "bwrap"))
    assert not decide("full-auto", "shell", "run_shell", {"command": "ls"}, git_repo).ask
    assert decide("full-auto", "shell", "run_shell", {"command": "rm -rf ~"}, git_repo).ask  # denylist stays


def test_resolve_falls_back_to_off_with_a_warning(no_sandbox):
    assert sandbox.resolve("off") == ("off", "")
    mode, why = sandbox.resolve("auto")
    assert mode == "off" and "no sandbox available (bwrap not installed)" in why and "approval" in why


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="probes bwrap")
def test_probe_reports_why(monkeypatch):
    monkeypatch.setattr(sandbox, "_bwrap", lambda: None)
    sandbox.forget()
    try:
        assert sandbox.available() == (False, "bwrap not installed: install the bubblewrap package")
        sandbox.forget()
        monkeypatch.setattr(sandbox, "_bwrap", lambda: "/bin/false")  # installed, but refused here
        ok, why = sandbox.available()
        assert not ok and why.startswith("bwrap does not work here")
    finally:
        sandbox.forget()


# ---- argv and profiles ----------------------------------------------------------------------------


def test_bwrap_argv_protects_git_after_binding_the_repo(git_repo):
    argv = sandbox.wrap(["/bin/sh", "-c", "true"], git_repo, exe="bwrap")
    root, dotgit = str(git_repo.resolve()), str((git_repo / ".git").resolve())
    bind, protect = argv.index("--bind"), argv.index("--ro-bind-try")
    assert bind < protect and argv[bind + 1] == root and argv[protect + 1] == dotgit
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--unshare-ipc" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL" and argv[argv.index("--chdir") + 1] == root
    assert argv[argv.index("/proc/sys") - 1] == "--ro-bind" and argv[-3:] == ["/bin/sh", "-c", "true"]
    assert "--unshare-net" not in sandbox.wrap(["true"], git_repo, allow_network=True, exe="bwrap")
    writable = sandbox.wrap(["true"], git_repo, git_writable=True, exe="bwrap")
    assert dotgit not in writable and f"{dotgit}/hooks" in writable and f"{dotgit}/config" in writable


def test_seatbelt_profile(git_repo, monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    argv = sandbox.wrap(["/bin/sh", "-c", "true"], git_repo)
    assert argv[0] == "/usr/bin/sandbox-exec" and argv[1] == "-p"
    profile = argv[2]
    assert "(deny file-write* (require-not" in profile and '(subpath (param "ROOT"))' in profile
    assert "(allow file-write" not in profile  # denies only: no reliance on rule order
    assert '(deny file-write* (subpath (param "GIT0")))' in profile and "(deny network*)" in profile
    assert f"ROOT={git_repo.resolve()}" in argv and f"GIT0={(git_repo / '.git').resolve()}" in argv
    assert "(deny network*)" not in sandbox.wrap(["true"], git_repo, allow_network=True)[2]


# ---- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize("line", ['sandbox = "off"', "allow_network = true"])
def test_repo_specrc_cannot_turn_the_sandbox_off(tmp_path, monkeypatch, line):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / ".specrc").write_text(line + "\n")
    with pytest.raises(ConfigError, match="may not be set by a repository's .specrc"):
        load_config(tmp_path)
    monkeypatch.setenv("SPEC_AGENT_SANDBOX", "sometimes")
    (tmp_path / ".specrc").unlink()
    with pytest.raises(ConfigError, match="'sandbox' must be one of"):
        load_config(tmp_path)


@needs_bwrap
def test_openblas_preload_of_the_cli_does_not_reach_the_sandbox(ctx, monkeypatch):
    """The CLI re-executes itself with OpenBLAS in LD_PRELOAD; preloaded into bwrap, that
    library makes it hang at start, so commands must be started without it."""
    import glob

    libs = glob.glob("/usr/lib/*-linux-gnu/libopenblas.so.0") + glob.glob("/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0")
    if not libs:
        pytest.skip("OpenBLAS not installed")
    monkeypatch.setenv("LD_PRELOAD", libs[0])
    sandbox.forget()
    try:
        assert sandbox.available()[0]
        r = call_tool("run_shell", {"command": "echo ${LD_PRELOAD:-none}", "timeout_s": 20}, ctx)
        assert r.ok and "none" in r.output, r.output
    finally:
        sandbox.forget()


# ---- git commands that may write the git folder ---------------------------------------------


@pytest.mark.parametrize("command, writable", [
    ("git commit -qam 'agent wip'", True),
    ("git add -A && git commit -qm 'why?' && git log --oneline -1", True),
    ("git stash pop", True),
    ("git commit -qm x > log.txt 2>&1", True),
    ("git stash", False),  # the denylist asks: a command it calls destructive stays read-only
    ("git reset --hard", False),
    ("git add -A && touch .git/hooks/pre-commit", False),  # another program
    ("GIT_DIR=.git git commit -qm x", False),  # an environment prefix
    ("git config core.hooksPath hooks", False),  # not a subcommand that records work
    ("git show -s --output=.git/config HEAD", False),
    ("git diff --outp=.git/hooks/pre-commit", False),  # an abbreviated --output
    ("git rebase -x 'touch .git/x' HEAD~1", False),
    ("git --work-tree=.git checkout HEAD -- hooks", False),
    ("git commit -qm x > .git/hooks/pre-commit", False),
    ("git commit -qm \"$(cat msg)\"", False),
    ("git add *.py", False),  # a file named like an option would become one
    ("git commit -qm '*.py: tidy'", True),  # quoted: no expansion
    ("git mv calc.py lib.py", True),
    ("git mv calc.py .git/commondir", False),  # git renames it before refusing the path
    ("git mv calc.py ./.GIT./commondir", False),
    ("git mv calc.py dotgit/commondir", False),  # a symlink to .git (made below)
])
def test_which_commands_may_write_the_git_folder(git_repo, command, writable):
    (git_repo / "dotgit").symlink_to(".git")
    assert sandbox.git_may_write(command, git_repo) is writable


def test_a_git_on_path_inside_the_repo_keeps_it_read_only(git_repo):
    assert not sandbox.git_may_write("git commit -qm x", git_repo, {"PATH": f"{git_repo}/bin:/usr/bin"})
    assert not sandbox.git_may_write("git commit -qm x", git_repo, {"PATH": "bin:/usr/bin"})
    assert sandbox.git_may_write("git commit -qm x", git_repo, {"PATH": "/usr/bin"})


@needs_bwrap
def test_git_commands_that_record_work_can_write_the_git_folder(ctx):
    (ctx.root / "calc.py").write_text("# the user's edit\n")
    r = sh(ctx, "git add calc.py && git commit -qm 'agent wip' && git log --oneline -1")
    assert r.ok and "agent wip" in r.output, r.output
    assert git(ctx.root, "show", "HEAD:calc.py") == "# the user's edit\n"
    assert git(ctx.root, "status", "--porcelain") == ""


@needs_bwrap
def test_hooks_and_config_stay_read_only_for_git_commands(ctx):
    hook = ctx.root / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\ntouch hook-ran\n")
    hook.chmod(0o755)
    config = (ctx.root / ".git/config").read_bytes()
    (ctx.root / "calc.py").write_text("# changed\n")
    r = sh(ctx, "git commit -qam wip")
    assert r.ok and not (ctx.root / "hook-ran").exists()  # no hooks for a git-writable command
    assert not sh(ctx, "git show -s --format=x --output=.git/config HEAD").ok
    assert not sh(ctx, "git add -A && echo x > .git/hooks/post-commit").ok
    assert not sh(ctx, "echo x > .git/hooks/pre-commit").ok
    assert (ctx.root / ".git/config").read_bytes() == config
    assert hook.read_text() == "#!/bin/sh\ntouch hook-ran\n" and not (ctx.root / ".git/hooks/post-commit").exists()


@needs_bwrap
def test_a_read_only_git_folder_is_explained(ctx):
    r = sh(ctx, "git add -A && ls")
    assert not r.ok and "Read-only file system" in r.output and "kept .git read-only" in r.output


@needs_bwrap
def test_full_auto_git_commands_through_the_sandbox_then_undo(git_repo, monkeypatch, tmp_path):
    """full-auto: a sandboxed `git commit -am` of the user's dirty file works, and a `git reset`
    that drops the user's staged version is undone by `spec-agent undo` (the snapshot taken
    before the command); `git stash`, which the denylist asks about, stays read-only even
    when approved."""
    from agent.cli import main
    from agent.events import ToolCallFinished
    from scripted import ScriptedModel, call, conversation, full_auto

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))

    def run(command: str, approver=None):
        model = ScriptedModel([call("run_shell", command=command), "Done."])
        events = list(conversation(git_repo, model, full_auto(), approver=approver).send("go"))
        return next(e for e in events if isinstance(e, ToolCallFinished))

    (git_repo / "calc.py").write_text("# the user's work\n")
    done = run("git commit -qam 'wip' && git log -1 --format=%s")
    assert done.ok and "wip" in done.output, done.output
    assert git(git_repo, "show", "HEAD:calc.py") == "# the user's work\n"

    (git_repo / "README.md").write_text("staged version\n")
    git(git_repo, "add", "README.md")
    (git_repo / "README.md").write_text("working version\n")
    staged = git(git_repo, "diff", "--cached")
    assert run("git reset -q").ok and git(git_repo, "diff", "--cached") == ""  # the staged text is gone
    assert main(["-C", str(git_repo), "undo"]) == 0
    assert git(git_repo, "diff", "--cached") == staged
    assert (git_repo / "README.md").read_text() == "working version\n"

    head = git(git_repo, "rev-parse", "HEAD")
    done = run("git stash", approver=lambda request: "yes")
    assert not done.ok and "kept .git read-only" in done.output
    assert (git_repo / "README.md").read_text() == "working version\n" and git(git_repo, "stash", "list") == ""
    assert git(git_repo, "rev-parse", "HEAD") == head


# ---- processes and kernel interfaces ---------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("command", [
    "b(){ b|b& }; b; sleep 30",  # a fork bomb that keeps its shell waiting
    "for i in $(seq 5000); do sleep 300{m} & done; wait",
])
def test_a_fork_bomb_is_stopped_and_the_machine_stays_usable(ctx, monkeypatch, command):
    monkeypatch.setattr(sandbox, "MAX_PROCESSES", 24)
    marker = f"{int(uuid.uuid4().int % 10**6) + 1000}"
    start = time.monotonic()
    r = sh(ctx, command.replace("{m}", marker), timeout_s=20)
    assert not r.ok and "processes at once" in r.output, r.output[:300]
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert alive(f"sleep 300{marker}") == ""
    assert sh(ctx, "echo still fine").output.endswith("still fine\n")


@needs_bwrap
def test_commands_have_no_capabilities_and_cannot_remount(ctx):
    marker = f"/etc/spec-agent-remount-{uuid.uuid4().hex}"
    r = sh(ctx, f"grep CapEff /proc/self/status; mount -o remount,rw,bind / ; touch {marker}")
    assert "CapEff:\t0000000000000000" in r.output and not Path(marker).exists()
    assert not sh(ctx, "v=$(cat /proc/sys/vm/swappiness) && echo $v > /proc/sys/vm/swappiness").ok


@needs_bwrap
def test_run_holds_only_symlinks(ctx):
    """Sockets in /run (a session bus, docker, a database) are out of reach."""
    r = sh(ctx, "find /run /var/run/ -mindepth 1 -maxdepth 1 ! -type l ! -name media")
    assert r.ok and r.output == "exit code 0\n", r.output


# ---- @path attachments ------------------------------------------------------------------------


def _attach(text: str, ctx: ToolContext, listed: list[str] | None = None, monkeypatch=None):
    """attach_mentions in a thread, so a read that blocks fails the test instead of hanging it;
    `listed`: what the repository listing returns (a file swapped after it was listed)."""
    import threading

    from agent.core import attach as inputs

    if listed is not None:
        monkeypatch.setattr(inputs, "repo_files", lambda ctx: listed)
    out: list = []
    worker = threading.Thread(target=lambda: out.append(inputs.attach_mentions(text, ctx)), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(timeout=5)
    assert out, "attach_mentions blocked"
    return out[0], time.monotonic() - start


def test_attachments_skip_fifos_devices_and_symlinks_to_them(ctx, monkeypatch):
    os.mkfifo(ctx.root / "pipe")
    (ctx.root / "to-pipe").symlink_to("pipe")
    (ctx.root / "zero").symlink_to("/dev/zero")
    (ctx.root / "loop").symlink_to("loop")
    names = ["pipe", "to-pipe", "zero", "loop", "calc.py"]
    (message, attached), _ = _attach(" ".join(f"@{n}" for n in names), ctx, names, monkeypatch)
    assert attached == ["calc.py"] and "def add" in message
    (message, attached), _ = _attach("@to-pipe @zero @calc.py", ctx)  # the real listing: no links
    assert attached == ["calc.py"]


def test_a_huge_attachment_is_read_only_as_far_as_it_is_shown(ctx):
    from agent.ui.inputs import MAX_ATTACH_CHARS

    big = ctx.root / "big.txt"
    with big.open("wb") as f:
        f.write("é".encode() * (MAX_ATTACH_CHARS + 10))
        f.truncate(8 << 30)  # 8 GiB, sparse: reading it whole would take minutes and the memory
    (message, attached), took = _attach("see @big.txt", ctx)
    assert attached == ["big.txt"] and took < 2
    body = message.split('<file path="big.txt">\n', 1)[1]
    assert body.startswith("é" * MAX_ATTACH_CHARS + "\n[... ") and "more bytes]" in body
    assert len(message) < MAX_ATTACH_CHARS + 500


def test_attachments_outside_the_repo_or_in_git_are_refused(ctx, monkeypatch, tmp_path):
    (tmp_path / "secret.txt").write_text("SECRET\n")
    (ctx.root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    names = ["leak.txt", ".git/config", "../secret.txt"]
    (message, attached), _ = _attach("@leak.txt @.git/config @../secret.txt", ctx, names, monkeypatch)
    assert attached == [] and "SECRET" not in message and "repositoryformatversion" not in message


def test_a_user_command_that_leaves_a_child_returns_at_its_timeout(git_repo):
    from agent.ui.inputs import run_user_command

    marker = f"{int(uuid.uuid4().int % 10**6) + 1000}"
    start = time.monotonic()
    code, out = run_user_command(f"echo started; (sleep 600{marker}) ; echo never", git_repo, timeout_s=1)
    assert code == 124 and "started" in out and "never" not in out and time.monotonic() - start < 5
    code, out = run_user_command(f"sleep 601{marker} & echo bg", git_repo, timeout_s=1)
    assert "bg" in out and time.monotonic() - start < 10
    time.sleep(0.2)
    assert alive(f"sleep 60[01]{marker}") == ""
    assert run_user_command("echo hi; echo err >&2; exit 3", git_repo) == (3, "hi\nerr\n")


@needs_bwrap
def test_what_a_git_command_plants_in_the_git_folder_is_removed(ctx, monkeypatch):
    """Should a command given a writable .git create a file there that git follows (a
    `commondir` pointing git at a folder of the repo), it is removed after the command."""
    monkeypatch.setattr(sandbox, "git_may_write", lambda command, root, env=None: True)
    r = sh(ctx, "mkdir -p evil && echo ../evil > .git/commondir && git log -1")
    assert not r.ok and "commondir" in r.output and "removed" in r.output
    assert not (ctx.root / ".git/commondir").exists()
    assert git(ctx.root, "rev-parse", "--git-common-dir").strip() == ".git"


@pytest.fixture
def visible_home(monkeypatch):
    """A fake home directory the sandbox can see (tmp_path lies in /tmp, private inside)."""
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp(dir="/var/tmp"))
    monkeypatch.setenv("HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@needs_bwrap
def test_home_socket_folders_are_hidden_offline(git_repo, visible_home):
    (visible_home / ".ssh").mkdir()
    (visible_home / ".ssh/cm-user@server").write_text("stands in for a ControlMaster socket\n")
    (visible_home / ".bashrc").write_text("# mine\n")
    r = sh(ToolContext(git_repo, shell_timeout_s=10), 'ls -A "$HOME/.ssh"; cat "$HOME/.bashrc"')
    assert r.ok and "cm-user" not in r.output and "# mine" in r.output
    r = sh(ToolContext(git_repo, shell_timeout_s=10, allow_network=True), 'ls -A "$HOME/.ssh"')
    assert r.ok and "cm-user@server" in r.output


def test_a_nul_byte_in_a_command_is_one_clear_error(ctx):
    r = sh(ctx, "echo a\x00b")
    assert not r.ok and r.output == "Error: the command contains a NUL byte, which no shell can be given; not run"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_pid_outside_any_sandbox_is_not_counted_as_one():
    """A sandbox's first pid that ended and was reused by a process outside it would show this
    machine's /proc (every process here): it is not counted, so no command is killed for it."""
    assert sandbox.process_count(os.getpid()) is None
