"""Estimators of an evaluation, each with a bootstrap confidence interval over questions.

* avg@n: mean correctness over all n samples of every question (= unbiased pass@1).
* pass@k: the unbiased estimator of "at least one of k samples is correct" from n ≥ k samples
  with c correct, 1 − C(n−c, k)/C(n, k) (Chen et al. 2021, computed as a product so large n
  never overflows); with k = n it is the empirical "any of n correct".
* maj@n: the most frequent extracted answer of the n samples is correct.

The interval resamples questions with replacement (a percentile bootstrap, seeded), which is
the unit the estimate generalises over.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples, c of them correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every draw of k samples holds a correct one
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def ks_for(n: int) -> list[int]:
    """The k reported for n samples: 1, 2, 4, ... below n, and n."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return [*out, n]


def bootstrap_ci(
    values: Sequence[float], samples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of ``values`` (one per question)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0 or samples < 1:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(samples, len(x)))].mean(axis=1)  # [samples]
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def accuracy(
    per_question: list[tuple[int, int, bool]], n: int, samples: int = 1000, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """``per_question``: (samples, correct, majority correct) each, with ``n`` samples per
    question. Returns {metric: (value, ci_low, ci_high)}."""
    cols: dict[str, list[float]] = {f"average@{n}": [c / s for s, c, _ in per_question]}
    for k in ks_for(n):
        cols[f"pass@{k}"] = [pass_at_k(s, c, k) for s, c, _ in per_question]
    cols[f"maj@{n}"] = [float(m) for _, _, m in per_question]
    out = {}
    for name, vals in cols.items():
        lo, hi = bootstrap_ci(vals, samples, seed=seed)
        out[name] = (float(np.mean(vals)) if vals else float("nan"), lo, hi)
    return out
