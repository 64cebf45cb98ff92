"""`spec-agent serve`: the exact speculative engine behind an OpenAI-compatible HTTP API.

protocol.py  request shapes and checks, response objects (no model, no HTTP)
prompt.py    messages → the chat template's input; the tool-call and JSON grammars
turn.py      one request's generation on the session: text, tool calls, constrained JSON
worker.py    the model's thread: loads the models, owns the session, runs jobs first come first served
metrics.py   Prometheus counters and gauges
app.py       Starlette routes, SSE streaming, errors, the request log
server.py    binding and uvicorn: `run` (the command) and `start` (a background thread)

Above the runtime (it builds from the Config as the runtime does); nothing imports it but the
command line and the tests. docs/serve.md describes the API.
"""
