"""The diversity sampler's data side: a per-question feature store (``question_features``), the
entropy it is measured in, and the selection objective that maximises it inside the difficulty
pyramid. See docs/datasets.md#diversity."""
