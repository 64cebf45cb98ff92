"""The user interfaces: `render` (the `-p` output), `tui` (Textual), `repl` (prompt-toolkit),
and `slash` (the slash commands both interactive UIs share). They consume events only."""
