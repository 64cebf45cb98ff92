"""The denylist: shell commands that always ask for approval, whatever the mode.

A command line is split into simple commands by tools/shellparse.py (quotes, comments, line
continuations, here-documents; the commands inside `$(...)` and backticks are judged too, and
such a substitution used as an operand counts as a path known only when the command runs).
Each word's brace lists are expanded as the shell expands them (`{~,x}` is `~` and `x`), the
variables the line sets (`D=~; rm -rf $D`, `for d in ~ ..`) and `$HOME`/`$PWD` replaced,
`~`, `~user` and `..` followed, `cd` followed. Wrappers (`timeout`, `nice`, `env` and its
`-S` string, `nohup`, `xargs`, `sudo`, `exec`, ...) are looked through; what runs a string
as a command line is judged as one, recursively: `sh -c`/`bash -c`, `eval`, `alias`, `trap`,
`su -c`/`script -c`/`flock -c`, a wrapper's quoted command (`watch 'rm -rf ~'`), a script
the line runs or sources when it is a file of the repository or written by the same line,
and a destructive command named inside an unknown program's arguments (`uv run rm -rf ~`,
`nix-shell --run '...'`). A shell reading its commands from a pipe or `source <(...)` asks.
Interpreter code (`python -c`, `perl -e`, ...) is tools/denylist_code.py's, git is
tools/denylist_git.py's, file commands tools/denylist_files.py's.

This is an early "are you sure", not what protects the user: the OS sandbox limits what a
command can touch and snapshots let `spec-agent undo` bring back what it destroyed inside the
repository. What the text does not show (strings built at run time) is not seen through. It
depends on nothing above `tools/`; the approval policy (agent/core/approvals.py) asks it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ._paths import PathError, read_inside
from .cmdwords import (
    Vars,
    braces,
    expand_vars,
    heredoc_bodies,
    home,
    option_values,
    outside,
    split_all,
    target,
)
from .denylist_code import code_of, code_why, interpreter
from .denylist_files import (
    DELETERS,
    MODERS,
    WRITERS,
    find_selects_leftovers,
    find_starts,
    find_why,
    may_be_dotgit,
    moder_why,
    rm_why,
    writes_why,
)
from .denylist_git import git_why
from .shellparse import SUBST, simple_commands

# (pattern, why): shapes no word-by-word check sees. Matched against the command line with
# quotes removed, case-sensitive like the shell; each scans a bounded stretch (linear time).
DENYLIST: tuple[tuple[str, str], ...] = (
    (r"\bdd\b[^;&|\n]{0,400}\bof=/dev/", "dd onto a device"),
    (r">\s*/dev/(sd|nvme|hd|disk|mmcblk)", "writes to a raw device"),
    (r":\(\)\s*\{\s*:\|:&\s*\};:", "fork bomb"),
    (r"\b(curl|wget)\b[^|\n]{0,400}\|\s*(sudo\s+)?(ba|z|da)?sh\b", "pipes a download into a shell"),
)
MAX_DEPTH = 6  # command lines inside command lines (sh -c, eval, scripts) judged
MAX_STEPS = 4000  # simple commands judged for one command line, nested ones included
MAX_TEXT = 64 * 1024  # characters of a command line (or a script) read
MAX_SCRIPT = 256 * 1024  # bytes of a script file read
_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "time", "!", "case", "esac",
             "function", "select", "coproc", "done", "fi"}
# Programs that run the command in their arguments: options taking a value (short letters,
# long names), and how many plain arguments come before the command.
_WRAPPERS: dict[str, tuple[str, tuple[str, ...], int]] = {
    "command": ("", (), 0), "builtin": ("", (), 0), "exec": ("a", (), 0), "nohup": ("", (), 0),
    "setsid": ("", (), 0), "time": ("fo", ("--format", "--output"), 0),
    "env": ("uCS", ("--unset", "--chdir", "--split-string"), 0),
    "nice": ("n", ("--adjustment",), 0), "ionice": ("cnp", ("--class", "--classdata", "--pid"), 0),
    "timeout": ("sk", ("--signal", "--kill-after"), 1),
    "stdbuf": ("ioe", ("--input", "--output", "--error"), 0),
    "xargs": ("aEedIiLlnPs", ("--arg-file", "--delimiter", "--eof", "--replace", "--max-lines",
                              "--max-args", "--max-procs", "--max-chars", "--process-slot-var"), 0),
    "sudo": ("CDghpRrTtUu", ("--close-from", "--chdir", "--group", "--host", "--prompt",
                            "--chroot", "--role", "--type", "--other-user", "--user"), 0),
    "doas": ("Cu", (), 0), "chrt": ("", (), 1), "taskset": ("", (), 1), "unbuffer": ("", (), 0),
    "flock": ("Ew", ("--conflict-exit-code", "--wait", "--timeout"), 1),
    "watch": ("dn", ("--differences", "--interval"), 0), "busybox": ("", (), 0), "toybox": ("", (), 0),
    "chroot": ("", ("--userspec", "--groups"), 1), "strace": ("eoOpsSuU", ("--output",), 0),
    "parallel": ("jS", ("--jobs",), 0), "caffeinate": ("tw", (), 0), "unshare": ("", (), 0),
    "fakeroot": ("", (), 0), "firejail": ("", (), 0), "torsocks": ("", (), 0),
}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh", "csh", "tcsh", "rbash"}
# Programs that, named inside another program's arguments, are judged as the command it runs.
_NAMED = {*DELETERS, *MODERS, *WRITERS, "setfacl", "find", "git", "eval", "dd", "truncate", *_SHELLS}
_STRING_RUNNERS = {"script", "flock", "su", "runuser", "sg", "nix-shell"}  # `-c STRING`, `--run STRING`
# Programs that only show or search their arguments: a command line among them is text.
_SHOWS = {"echo", "printf", "grep", "egrep", "fgrep", "rg", "ag", "ack", "man", "which", "type",
          "whatis", "apropos", "help", "info", "test", "[", "[[", ":", "true", "false", "gh", "glab",
          "jq", "yq", "sed", "tr", "cut", "sort", "uniq", "wc", "head", "tail", "cat", "less", "more",
          "diff", "cmp", "basename", "dirname", "realpath", "readlink", "stat", "file", "ls", "tree",
          "export", "declare", "local", "readonly", "typeset", "unset", "read", "set", "git", "hash"}
# Environment whose value is a command or file a program runs.
_RUN_VARS = re.compile(r"GIT_\w+|PAGER|MANPAGER|EDITOR|VISUAL|\w*_COMMAND|\w*_CMD|PROMPT_COMMAND")
_AS_OTHER = {"sudo", "su", "doas", "pkexec", "runuser"}
_ACCOUNTS = {"chsh", "chfn", "passwd", "usermod", "useradd", "userdel", "groupadd", "groupdel",
             "visudo", "vipw", "chpasswd"}
_MACHINE = {"mount", "umount", "swapoff", "swapon", "mkswap", "fdisk", "sfdisk", "parted",
            "losetup", "modprobe", "insmod", "rmmod", "iptables", "nft", "killall5"}
_SERVICE_VERBS = {"enable", "disable", "start", "stop", "restart", "mask", "kill", "link", "edit",
                  "isolate", "set-default", "load", "unload", "bootstrap", "bootout", "daemon-reload"}


def _split_string(args: list[str]) -> list[str] | None:
    """The words of env's `-S STRING` / `--split-string=STRING`, or None."""
    for i, a in enumerate(args):
        if not a.startswith("-") or a == "--":
            return None
        value = (args[i + 1] if i + 1 < len(args) else "") if a in ("-S", "--split-string") else \
            a.split("=", 1)[1] if a.startswith("--split-string=") else \
            a[2:] if a.startswith("-S") else None
        if value is not None:
            found = simple_commands(value)
            return found[0] if found else []
    return None


def _skip_options(words: list[str], short: str, long: tuple[str, ...]) -> list[str]:
    """`words` after the leading options of a wrapper (and the values they take)."""
    while words and words[0].startswith("-") and words[0] != "-":
        w, words = words[0], words[1:]
        if w == "--":
            break
        takes = (w.startswith("--") and "=" not in w and w in long) or (
            not w.startswith("--") and len(w) == 2 and w[1] in short)
        if takes and words:
            words = words[1:]
    return words


def _without_prefixes(words: list[str]) -> tuple[list[str], bool, dict[str, str], list[str]]:
    """`env X=1 timeout 5 nohup rm ...` → `rm ...`: the words of the program that really runs,
    whether a wrapper (xargs) feeds it operands the text does not show, the variables set
    for it, and the wrappers."""
    fed, env, wrappers = False, {}, []
    while words:
        name = os.path.basename(words[0])
        if re.fullmatch(r"\w+=.*", words[0], re.DOTALL):
            key, _, value = words[0].partition("=")
            env[key] = value
            words = words[1:]
        elif words[0] in _KEYWORDS:
            words = words[1:]
        elif name in _WRAPPERS:
            short, long, plain = _WRAPPERS[name]
            wrappers.append(name)
            fed = fed or name == "xargs"
            split = _split_string(words[1:]) if name == "env" else None
            words = _skip_options(words[1:], short, long)
            if split:  # `env -S 'rm -rf ~'`: the string is the command's first words
                words = split + words
            words = words[plain:]
        else:
            break
    return words, fed, env, wrappers


def programs(command: str) -> list[str] | None:
    """The program each simple command of `command` runs (`$(...)` and backticks included),
    in order without repeats; None when one cannot be known from the text (a variable, a
    shell or `eval` running a string)."""
    out: list[str] = []
    for argv in simple_commands(command):
        words = _without_prefixes(split_all(argv)[0])[0]
        if not words:
            continue
        name = os.path.basename(words[0])
        if "$" in words[0] or name in (*_SHELLS, "eval", "find", "source", "."):
            return None  # (find runs what -exec names)
        out.append(name)
    return list(dict.fromkeys(out)) or None


class _Line:
    """One command line being judged: the repository, where it runs, what it has set and
    written so far."""

    def __init__(self, text: str, root: Path, cwd: Path, depth: int, steps: list[int]):
        self.text, self.root, self.cwd, self.depth = text, root, cwd, depth
        self.steps = steps  # shared with the lines inside it: what is left of MAX_STEPS
        self.vars: Vars = {}
        self.written: dict[Path, list[str] | None] = {}  # file → texts it may hold, None: unknown
        self.prev: list[str] = []  # the previous simple command's words (what feeds xargs)

    def judge(self, command: str) -> str:
        """Why `command`, run from here, is destructive."""
        if self.depth >= MAX_DEPTH:
            return "commands nested too deep to read"
        return _judged(command, self.root, self.cwd, self.depth + 1, self.steps)

    def words(self, argv: list[str]) -> list[str]:
        """`argv` with brace lists, then variables, expanded."""
        return [v for word in argv for w in braces(word) for v in expand_vars(w, self.cwd, self.vars)]

    def assign(self, argv: list[str]) -> bool:
        """Note what `NAME=value`, `export NAME=value`, `for NAME in ...`, `read NAME` set;
        whether `argv` was only that."""
        if argv[0] == "for" and len(argv) >= 2:
            values = self.words(argv[3:]) if argv[2:3] == ["in"] else None
            self.vars[argv[1]] = None if values is None or any("$" in v for v in values) else values
            return True
        if argv[0] in ("read", "mapfile", "readarray"):
            for name in argv[1:]:
                if re.fullmatch(r"\w+", name):
                    self.vars[name] = None
            return True
        decl = argv[0] in ("export", "declare", "local", "readonly", "typeset")
        pairs = argv[1:] if decl else argv
        if not pairs or not all(re.fullmatch(r"\w+=.*", p, re.DOTALL) or (decl and p.startswith("-"))
                                for p in pairs):
            return False
        for p in pairs:
            if p.startswith("-"):
                continue
            name, _, value = p.partition("=")
            if SUBST in value:
                self.vars[name] = None
                continue
            if value.startswith("~"):
                found = target(value.split(":")[0], self.cwd)
                value = str(found) + value[len(value.split(":")[0]):] if found else value
            values = expand_vars(value, self.cwd, self.vars)
            self.vars[name] = None if any("$" in v for v in values) else values
        return True


def _shell_why(line: _Line, args: list[str], stdin: list[str]) -> str:
    """`sh -c SCRIPT` / `bash -lc SCRIPT` judged as a command line; `bash FILE` as the file;
    a shell reading commands from its input asks unless the line shows them (a here-string)."""
    valued = ("--rcfile", "--init-file", "-o", "+o", "-O", "+O")
    for i, a in enumerate(args):
        if a.startswith("--") or a in valued or (i and args[i - 1] in valued):
            continue
        if not a.startswith(("-", "+")):
            return _script_why(line, a) if a != SUBST else "a shell running a script known only when it runs"
        if "c" in a[1:]:
            script = next((w for w in args[i + 1:] if not w.startswith("-") or w == "-"), "")
            return line.judge(script)
    if stdin and "|" not in line.text:
        return next((why for why in map(line.judge, stdin) if why), "")
    return "a shell running commands from its input, which the text does not show"


def _script_why(line: _Line, path: str, run: bool = False) -> str:
    """A script run or sourced: what the line wrote into it, or the repository file's text
    (with `run`, a file run as a program: only when it is a shell script)."""
    if path in ("-", "/dev/stdin") or path.startswith(("/dev/fd/", "/proc/")) or SUBST in path:
        return f"runs commands from {path}, which the text does not show"
    full = target(path, line.cwd)
    if full is None:
        return f"runs a script known only when the command runs ({path})"
    if full in line.written:
        texts = line.written[full]
        if texts is None:
            return f"runs {path}, which this command line wrote with text it does not show"
        return next((why for why in map(line.judge, texts) if why), "")
    try:
        text = read_inside(line.root, os.path.relpath(full, line.root), MAX_SCRIPT)
    except (PathError, OSError, ValueError):
        return ""  # outside the repository or not a readable text file: not seen from here
    first = text.split("\n", 1)[0]
    if run and first.startswith("#!") and not any(os.path.basename(w) in _SHELLS for w in first[2:].split()):
        return ""  # (a program in another language)
    return line.judge(text)


def _embedded_why(line: _Line, words: list[str]) -> str:
    """An unknown program whose arguments hold a destructive command (`uv run rm -rf ~`,
    `nix-shell --run 'rm -rf ~'`)."""
    for i in range(1, len(words)):
        w, name = words[i], os.path.basename(words[i])
        line.steps[0] -= 1
        if line.steps[0] < 0:
            return "a command line too intricate to read"
        why = _command_why(line, words[i:]) if name in _NAMED or interpreter(name) else ""
        if not why and any(c in w for c in " \t\n;&|") and not w.startswith("-"):
            why = line.judge(w)
        if why:
            return why
    return ""


def _xargs_feed(line: _Line) -> list[str]:
    """What xargs may feed its command: the operands of the command before (`echo ~ |
    xargs rm`, `find ~ | xargs rm`) and a path known only when it runs, unless that command
    is a find that selects only build leftovers."""
    prev = line.prev
    if prev and os.path.basename(prev[0]) == "find":
        starts = find_starts(prev[1:])
        return starts if find_selects_leftovers(prev[1:]) else [*starts, SUBST]
    ops = [w for w in prev[1:] if not w.startswith("-")] if prev and prev[0] in ("echo", "printf", "ls") else []
    return [*ops, SUBST]


def _runner_why(line: _Line, name: str, args: list[str]) -> str | None:
    """Programs that run a string or a file as commands; None for other programs."""
    if name in _SHELLS:
        return _shell_why(line, args, [])
    if name == "eval":
        return line.judge(" ".join(args))
    if name in ("source", "."):
        return _script_why(line, args[0]) if args else ""
    if name == "alias":
        return next((why for a in args if "=" in a for why in [line.judge(a.partition("=")[2])] if why), "")
    if name == "trap":
        return line.judge(args[0]) if args and not args[0].startswith("-") else ""
    if name in _STRING_RUNNERS:
        strings = option_values(args, "-c", "--command", "--run")
        strings += [args[i + 1] for i, a in enumerate(args[:-1]) if re.fullmatch(r"-[a-z]*c", a)]
        return next((why for why in map(line.judge, strings) if why), "")
    if interpreter(name):
        codes, stdin, files = code_of(name, args)
        if stdin:
            codes = [line.text]
        for f in files:
            if outside(f, line.cwd, line.root) or may_be_dotgit(f):
                return f"{name} -i writes outside the repo ({f})"
        return next((why for c in codes for why in [code_why(c, line.cwd, line.root, line.judge)] if why), "")
    return None


def _system_why(line: _Line, name: str, args: list[str]) -> str:
    """Programs that change the machine, its services, accounts or scheduled jobs."""
    if name == "crontab" and args not in (["-l"], []) and "-l" not in args:
        return "crontab changes the user's scheduled jobs"
    if name in ("at", "batch"):
        return f"{name} schedules a command to run later"
    if name in ("systemctl", "launchctl", "service") and _SERVICE_VERBS & set(args):
        return f"{name} changes system services"
    if name in _ACCOUNTS:
        return f"{name} changes user accounts"
    if name in ("shutdown", "reboot", "halt", "poweroff") or (
            name in ("systemctl", "init", "telinit") and {"poweroff", "reboot", "halt", "0", "6"} & set(args)):
        return "powers the machine off"
    if name.startswith("mkfs") or name in ("wipefs", "mkswap"):
        return "formats a filesystem"
    if name in _MACHINE or (name == "sysctl" and "-w" in args):
        return f"{name} changes the machine's configuration"
    if name == "kill" and ("-1" in args[1:] or args[-2:] == ["--", "-1"]):
        return "kill -1 signals every process"
    if name in ("pkill", "killall", "skill", "slay"):
        return f"{name} signals every process whose name matches, the user's own too"
    if name == "ssh-add" and {"-D", "-d", "-x", "-X", "-e", "-s"} & set(args):
        return "ssh-add changes the keys the SSH agent holds"
    if name in ("make", "gmake", "ninja", "cmake") and any(
            outside(d, line.cwd, line.root) for d in option_values(args, "-C", "--directory")):
        return f"{name} -C runs the build of a folder outside the repo"
    return ""


def _command_why(line: _Line, argv: list[str]) -> str:
    """Why one simple command (words already expanded) is destructive, or ''."""
    words, redirects, strings = split_all(argv)
    cwd, root = line.cwd, line.root
    for t in redirects:
        if outside(t, cwd, root):
            return f"writes outside the repo ({t})"
        if may_be_dotgit(t):
            return f"writes in the git folder ({t})"
    words, fed, env, wrappers = _without_prefixes(words)
    if _AS_OTHER & {*wrappers, *words[:1]}:
        return "runs as another user"
    for key, value in env.items():
        if key in ("BASH_ENV", "ENV", "LD_PRELOAD", "DYLD_INSERT_LIBRARIES") and value:
            return f"{key} makes the program load or run {value}"
        why = line.judge(value) if _RUN_VARS.fullmatch(key) and " " in value.strip() else ""
        if why:
            return f"{key}: {why}"
    if not words:
        return ""
    if any(c in words[0] for c in " \t\n;&|"):  # `watch 'rm -rf ~'`, `$cmd` set to a line
        return line.judge(" ".join(words))
    name, args = os.path.basename(words[0]), words[1:] + (_xargs_feed(line) if fed else [])
    if "$" in words[0] or SUBST in words[0]:
        return f"runs a program known only when the command runs ({words[0]})"
    if name in _SHELLS and (strings or "<<" in argv):
        return _shell_why(line, args, strings + (heredoc_bodies(line.text) if "<<" in argv else []))
    ran = _runner_why(line, name, args)
    if ran is not None:
        return ran
    if "/" in words[0] and not interpreter(name):  # `./script.sh`: the script's text
        why = _script_why(line, words[0], run=True)
        if why:
            return why
    if name == "git":
        return git_why(args, cwd, root, {k: v for k, v in env.items() if k.startswith("GIT_")}, line.judge)
    if name == "find":
        return find_why(args, cwd, root, lambda sub, at: _command_why(line, sub))
    if name in MODERS or name == "setfacl":
        return moder_why(name, args, cwd, root)
    if name == "rm":
        why = rm_why(args, cwd, root)
        if why:
            return why
    return writes_why(name, args, cwd, root) or _system_why(line, name, args) or (
        _embedded_why(line, words) if name not in _SHOWS else "")


def _note_writes(line: _Line, argv: list[str]) -> None:
    """Remember what a command writes into files by redirection (`echo X > f.sh`,
    `cat > f.sh <<EOF`), for a script the line runs later."""
    words, redirects, strings = split_all(argv)
    texts: list[str] | None = None
    if words and words[0] in ("echo", "printf"):
        texts = [" ".join(words[1:]).replace("\\n", "\n")]
    elif words and words[0] in ("cat", "tee") and ("<<" in argv or strings):
        texts = heredoc_bodies(line.text) + strings
    targets = redirects + (words[1:] if words and words[0] == "tee" else [])
    for t in targets:
        full = target(t, line.cwd)
        if full is not None and not t.startswith("-"):
            known = line.written.get(full, [])
            line.written[full] = None if texts is None or known is None else known + texts


def denylisted(command: str, root: Path | None = None, cwd: Path | None = None) -> str:
    """Why `command` (run in `cwd`, by default `root`, the repo) is destructive; '' when it
    is not. A line too long or too intricate to read (MAX_TEXT, MAX_STEPS) counts as
    destructive."""
    root = (root or Path.cwd()).resolve()
    return _judged(command, root, cwd or root, 0, [MAX_STEPS])


def _judged(command: str, root: Path, cwd: Path, depth: int, steps: list[int]) -> str:
    if len(command) > MAX_TEXT:
        return f"a command line over {MAX_TEXT // 1024}K characters, too long to read"
    line = _Line(command, root, cwd, depth, steps)
    commands = simple_commands(command)
    flat = " ; ".join(" ".join(argv) for argv in commands)
    for pattern, why in DENYLIST:
        if re.search(pattern, flat) or re.search(pattern, command):
            return why
    for argv in commands:
        steps[0] -= 1
        if steps[0] < 0:
            return "a command line too intricate to read"
        if line.assign(argv):
            continue
        if argv[0] in ("cd", "pushd"):  # later relative paths are relative to the new folder
            dirs = [a for a in line.words(argv[1:]) if not re.fullmatch(r"-[LPe@]+|--", a)]
            dest = target(dirs[0], line.cwd) if dirs else home()
            line.cwd = dest if dest is not None else Path("/")  # unknown: assume the worst
            continue
        why = _command_why(line, line.words(argv))
        if why:
            return why
        _note_writes(line, argv)
        line.prev = line.words(argv)
    return ""
