"""The GRPO-TCR trainer and the SFT stage: config, episodes, log-probs, loss, distributed
reductions, metrics, checkpoints (``trainer/train.py`` is the loop)."""
