"""Who produces the tokens: `local` runs the in-process MLX engine (with grammar-constrained
tool calls). Every backend implements agent.core.conversation.Model."""
