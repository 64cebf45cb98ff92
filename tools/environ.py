"""The environment the model's shell commands get: an allowlist, never the user's secrets.

A command the model writes can print its environment (`env`, `/proc/self/environ`) into a
tool result, which goes to the conversation history and, with a remote backend, to the
server. So commands get only the names in `ALLOWED` (and `LC_*`): what programs need to find
themselves, the user's locale and terminal, and the usual toolchain settings. Names that look
like credentials (`SECRET_NAMES`: `*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*`, ...) are never
passed, even when allowlisted, unless the user names them in `shell_env_passthrough` (the
user's config file, the environment or a flag; a repository's `.specrc` may not set it).
`secret_values` lists the values such names hold, for redacting them from what we print.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Iterable, Mapping

ALLOWED = frozenset({
    # the system and the user
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR", "TZ", "HOSTNAME",
    "LANG", "LANGUAGE", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "CI",
    # C and C++ toolchains, build tools
    "CC", "CXX", "CPP", "LD", "AR", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "MAKEFLAGS",
    "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
    # Python, Node, Go, Rust, Java, Ruby
    "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONUTF8", "VIRTUAL_ENV",
    "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PIP_INDEX_URL", "UV_CACHE_DIR", "PIPX_HOME",
    "NODE_PATH", "NODE_OPTIONS", "NVM_DIR", "PNPM_HOME", "npm_config_cache",
    "GOPATH", "GOROOT", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN",
    "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "RUSTFLAGS", "CARGO_TARGET_DIR",
    "JAVA_HOME", "GRADLE_USER_HOME", "MAVEN_OPTS", "GEM_HOME", "GEM_PATH", "BUNDLE_PATH",
})
ALLOWED_PREFIXES = ("LC_",)
# Names that hold credentials, by their shape (upper-cased before matching).
SECRET_NAMES = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH|COOKIE|"
                          r"SESSION|PRIVATE)(_|$)|API_?KEY|ACCESS_?KEY|PASSWORD|SECRET")
NEVER = frozenset({"SPEC_AGENT_API_KEY", "OPENAI_API_KEY"})  # the agent's own keys, by name too


def is_secret_name(name: str) -> bool:
    return name in NEVER or bool(SECRET_NAMES.search(name.upper()))


def parse_passthrough(setting: str) -> tuple[str, ...]:
    """The names (or glob patterns such as `MY_TOOL_*`) in a `shell_env_passthrough` value:
    separated by commas or spaces."""
    return tuple(n for n in re.split(r"[\s,]+", setting or "") if n)


def _passed(name: str, passthrough: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in passthrough)


def scrubbed(env: Mapping[str, str] | None = None, passthrough: Iterable[str] = ()) -> dict[str, str]:
    """`env` (default: ours) cut to the allowlist plus the names `passthrough` gives; a
    credential-shaped name only when `passthrough` names it."""
    env = os.environ if env is None else env
    passthrough = tuple(passthrough)
    out = {}
    for name, value in env.items():
        if _passed(name, passthrough):
            out[name] = value
        elif (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not is_secret_name(name):
            out[name] = value
    return out


def secret_values(env: Mapping[str, str] | None = None, min_len: int = 6) -> list[str]:
    """The values of the credential-shaped variables of `env` (default: ours), longest first
    (so that a key containing another is redacted whole); short ones are left out (they would
    redact ordinary words)."""
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= min_len}
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every secret value (default: `secret_values()`) replaced by `[redacted]`."""
    for value in secret_values() if secrets is None else secrets:
        if value and value in text:
            text = text.replace(value, "[redacted]")
    return text
