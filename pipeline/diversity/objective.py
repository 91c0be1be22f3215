"""The selection objective: inside each difficulty bin's quota, pick questions so the sum of
the marginal entropies of the feature dimensions is as large as the supply allows.

With N picks fixed, ``H_d = log N - (1/N) * sum_v n_dv log n_dv``, so maximising
``sum_d H_d`` is minimising ``sum_d sum_v F(n_dv)`` with ``F(n) = n log n``. One more pick of a
question whose value in dimension d is ``v_d`` costs ``sum_d f(n_{d,v_d})`` with
``f(n) = (n+1) log(n+1) - n log n`` (increasing in n): the greedy picks the cheapest question,
i.e. the one whose values are rarest so far across every dimension at once. Questions with
equal features are interchangeable, so the greedy runs over *cells* (distinct feature tuples),
vectorised with numpy, in chunks of ``ceil(k / 4096)`` picks (exact one by one below 4096
picks), and the bins are filled in turn (the least-filled first), so every bin's picks see the
counts of the whole dataset. Ties break by a seeded rank; inside a cell the questions are a
seeded shuffle. The sum of marginals (rather than the joint) is the target because the joint
over eight dimensions is mostly unique tuples on real supplies: maximising it is a draw of
distinct tuples, which says nothing about any one dimension.
"""

from __future__ import annotations

import math
import random

import numpy as np

CHUNKS = 4096


def _gain_table(n_max: int) -> np.ndarray:
    n = np.arange(n_max + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        nlogn = np.where(n > 0, n * np.log(np.maximum(n, 1)), 0.0)
    return np.append(nlogn[1:] - nlogn[:-1], np.inf)  # f(n) for n = 0..n_max; f(n_max) = inf


def max_entropy_pick(
    bins: dict[str, list[dict]],
    take: dict[str, int],
    dimensions: tuple[str, ...],
    seed: int,
) -> dict[str, list[dict]]:
    """``take[b]`` items of each ``bins[b]``, greedily maximising the sum over ``dimensions`` of
    the marginal entropy of the whole selection."""
    rng = random.Random(seed)
    codes: list[dict] = [{} for _ in dimensions]  # per dimension: value -> code
    cells: dict[tuple, list[dict]] = {}  # (bin, code per dimension) -> items
    for b, items in bins.items():
        for it in items:
            key = (
                b,
                *(codes[i].setdefault(it.get(d), len(codes[i])) for i, d in enumerate(dimensions)),
            )
            cells.setdefault(key, []).append(it)
    keys = sorted(cells)
    rng.shuffle(keys)  # the seeded tie-break order
    for k in keys:
        rng.shuffle(cells[k])
    if not keys:
        return {b: [] for b in bins}
    vals = np.array([k[1:] for k in keys], dtype=np.int64).reshape(len(keys), len(dimensions))
    supply = np.array([len(cells[k]) for k in keys], dtype=np.int64)
    names = list(bins)
    bin_of = np.array([names.index(k[0]) for k in keys])
    total = sum(take.values())
    f = _gain_table(total + 1)
    counts = [np.zeros(len(c), dtype=np.int64) for c in codes]  # per dimension, per value
    picked = np.zeros(len(keys), dtype=np.int64)
    tie = np.arange(len(keys)) * 1e-12  # seeded rank (keys were shuffled)
    chunk = max(1, math.ceil(total / CHUNKS))
    filled = {b: 0 for b in names}
    while True:
        open_bins = [b for b in names if filled[b] < take[b]]
        if not open_bins:
            break
        b = min(open_bins, key=lambda x: (filled[x] / take[x], names.index(x)))
        ok = (bin_of == names.index(b)) & (picked < supply)
        if not ok.any():
            take[b] = filled[b]  # nothing left in this bin (the caller capped take by supply)
            continue
        cost = sum(f[counts[i][vals[:, i]]] for i in range(len(dimensions))) + tie
        c = int(np.argmin(np.where(ok, cost, np.inf)))
        n = int(min(chunk, supply[c] - picked[c], take[b] - filled[b]))
        picked[c] += n
        filled[b] += n
        for i in range(len(dimensions)):
            counts[i][vals[c, i]] += n
    out: dict[str, list[dict]] = {b: [] for b in bins}
    for k, n in zip(keys, picked.tolist(), strict=True):
        out[k[0]] += cells[k][:n]
    return out
