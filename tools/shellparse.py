"""Shell command text → the simple commands it runs, for the denylist (tools/denylist.py).

A small reader of POSIX shell syntax, enough to see what a command line runs: quotes and
backslashes are removed, comments dropped (`#` at the start of a word, to the end of its
line), line continuations joined, newlines and `; & && || | ( ) { } !` separate commands,
redirections stay as their own words (`>`, `>>`, `2`, `>&`), here-document bodies are
skipped. A command substitution (`$(...)`, backticks, `<(...)`, `>(...)`) stays in its word
as the placeholder `SUBST` (its value is unknowable from the text) and the commands inside it
are returned too, after the others. It does not expand variables, globs or aliases and is
not a full grammar (`case` patterns, arithmetic are read loosely); where it is unsure it
sees more commands, never fewer.
"""

from __future__ import annotations

SUBST = "$(...)"  # a word's part whose value only the running shell knows
MAX_DEPTH = 8  # nested substitutions read; deeper ones only leave their placeholder
_OPERATORS = (";;", "&&", "||", "|&", ";", "&", "|", "(", ")")
_SEPARATOR_WORDS = {"{", "}", "!"}


def simple_commands(text: str, depth: int = 0) -> list[list[str]]:
    """The simple commands of `text`, each a list of words (redirections included)."""
    reader = _Reader(text)
    reader.read()
    out = reader.commands
    if depth < MAX_DEPTH:
        for inner in reader.inner:
            out += simple_commands(inner, depth + 1)
    return out


class _Reader:
    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.commands: list[list[str]] = []
        self.words: list[str] = []
        self.cur: str | None = None  # the word being read (None between words)
        self.quoted = False  # the current word had quotes (so `"{"` is a word, not a brace)
        self.inner: list[str] = []  # texts of command substitutions
        self.heredocs: list[tuple[str, bool]] = []  # (delimiter, strip leading tabs) pending
        self.want_delimiter: bool | None = None  # after `<<`: whether the next word strips tabs

    def read(self) -> None:
        while self.i < len(self.s):
            self._step()
        self._end_command()

    def _add(self, text: str) -> None:
        self.cur = (self.cur or "") + text

    def _end_word(self) -> None:
        if self.cur is None:
            return
        word, quoted = self.cur, self.quoted
        self.cur, self.quoted = None, False
        if self.want_delimiter is not None:
            self.heredocs.append((word, self.want_delimiter))
            self.want_delimiter = None
        if word in _SEPARATOR_WORDS and not quoted:
            self._end_command()
        else:
            self.words.append(word)

    def _end_command(self) -> None:
        self._end_word()
        if self.words:
            self.commands.append(self.words)
        self.words = []

    def _step(self) -> None:
        s, i = self.s, self.i
        c, nxt = s[i], s[i + 1 : i + 2]
        if c == "\\":
            if nxt != "\n":  # backslash-newline joins lines; otherwise the next char is literal
                self._add(nxt)
            self.i += 2
        elif c in " \t\r":
            self._end_word()
            self.i += 1
        elif c == "\n":
            self._end_command()
            self.i += 1
            self._skip_heredocs()
        elif c == "#" and self.cur is None:
            end = s.find("\n", i)
            self.i = len(s) if end < 0 else end
        elif c == "'":
            end = s.find("'", i + 1)
            end = len(s) if end < 0 else end
            self._add(s[i + 1 : end])
            self.quoted, self.i = True, end + 1
        elif c == '"':
            self._double_quoted()
        elif c == "`":
            self._backticks()
        elif (c == "$" and nxt == "(") or (c in "<>" and nxt == "("):
            self._substitution(i + 2)
        elif c in "<>" or (c == "&" and nxt == ">"):
            self._redirect()
        elif c in ";&|()":
            op = next(o for o in _OPERATORS if s.startswith(o, i))
            self._end_command()
            self.i += len(op)
        else:
            self._add(c)
            self.i += 1

    def _double_quoted(self) -> None:
        s = self.s
        self._add("")
        self.quoted = True
        self.i += 1
        while self.i < len(s) and s[self.i] != '"':
            c, nxt = s[self.i], s[self.i + 1 : self.i + 2]
            if c == "\\" and nxt in ('$', '`', '"', "\\", "\n"):
                if nxt != "\n":
                    self._add(nxt)
                self.i += 2
            elif c == "$" and nxt == "(":
                self._substitution(self.i + 2)
            elif c == "`":
                self._backticks()
            else:
                self._add(c)
                self.i += 1
        self.i += 1

    def _backticks(self) -> None:
        s, j = self.s, self.i + 1
        while j < len(s) and s[j] != "`":
            j += 2 if s[j] == "\\" else 1
        self.inner.append(s[self.i + 1 : j].replace("\\`", "`"))
        self._add(SUBST)
        self.i = j + 1

    def _substitution(self, start: int) -> None:
        """`$(` (or `<(`, `>(`) at start-2: find its `)`, keep the text for reading later."""
        s, j, depth = self.s, start, 1
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                end = s.find(c, j + 1)
                j = len(s) if end < 0 else end + 1
                continue
            depth += (c == "(") - (c == ")")
            if depth == 0:
                break
            j += 1
        self.inner.append(s[start:j])
        self._add(SUBST)
        self.i = j + 1

    def _redirect(self) -> None:
        s, j = self.s, self.i
        if self.cur is not None and not self.cur.isdigit():
            self._end_word()  # `a>b`: `a` is a word; `2>b`: `2` names the descriptor
        self._end_word()
        while j < len(s) and s[j] in "<>&|" and j - self.i < 3:
            j += 1
        op = s[self.i : j]
        if op.startswith("<<") and op != "<<<":
            strip = s[j : j + 1] == "-"
            j += strip
            self.want_delimiter = strip
        self.words.append(op)
        self.i = j

    def _skip_heredocs(self) -> None:
        """After a newline: skip the bodies of pending here-documents, in order."""
        s = self.s
        for delimiter, strip in self.heredocs:
            while self.i < len(s):
                end = s.find("\n", self.i)
                end = len(s) if end < 0 else end
                line = s[self.i : end]
                self.i = end + 1
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
        self.heredocs = []
