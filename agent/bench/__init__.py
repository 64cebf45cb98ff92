"""Every measurement of spec-agent: `spec-agent bench spec|cache|lookup|grammar` (spec, pair,
cache, lookup, grammar), their workloads and synthetic model pairs, and one-off probes run as
`python -m agent.bench.<name>` (measure_*, prefill_*). Only the CLI and the tests import it."""
