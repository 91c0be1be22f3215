"""What the project runs on out of the box: the demo corpus (``corpus``), the nano agent task
family with its sandbox-run solver trajectories (``nano``) and a tiny random-weight model with a
ChatML tokenizer for tests and benchmarks (``tiny_model``)."""

from pipeline.demo.corpus import write_demo

__all__ = ["write_demo"]
