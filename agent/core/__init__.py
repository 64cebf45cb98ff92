"""The conversation, engine-neutral: turns, tool calls, approvals, git safety, history.

Nothing here loads a model or imports a UI toolkit; a `Model` (agent/backends) produces the
tokens and a UI (agent/ui) consumes the events.
"""
