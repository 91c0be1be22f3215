"""Rollouts: the sandbox, the verifier hook-up, the agent loop and the inference engines."""
