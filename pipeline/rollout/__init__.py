"""Rollouts: the agent loop and the inference engines (tools run in pipeline.sandbox)."""
