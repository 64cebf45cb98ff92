"""Who produces the tokens: `local` runs the in-process MLX engine (with grammar-constrained
tool calls), `openai` talks to an OpenAI-compatible server (vLLM, SGLang, llama-server,
mlx_lm.server). Every backend implements agent.backends.base.Backend."""
