"""The inference engine: loading, sampling, plain and speculative decoding, sessions.

A library: it yields events from `agent.events` and imports no UI toolkit.
"""
