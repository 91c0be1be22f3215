"""GRPO-TCR trainer (see issue 7); empty until the training stage lands."""
