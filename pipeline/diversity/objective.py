"""The selection objective: inside each difficulty bin's quota, pick questions so the sum of
the marginal entropies of the feature dimensions is as large as the supply allows.

With N picks fixed, ``H_d = log N - (1/N) * sum_v n_dv log n_dv``, so maximising
``sum_d H_d`` is minimising ``sum_d sum_v F(n_dv)`` with ``F(n) = n log n``. One more pick of a
question whose value in dimension d is ``v_d`` costs ``sum_d f(n_{d,v_d})`` with
``f(n) = (n+1) log(n+1) - n log n`` (increasing in n): the greedy picks the cheapest question,
i.e. the one whose values are rarest so far across every dimension at once.

Questions with equal features are interchangeable, so the greedy runs over *cells* (distinct
(bin, feature tuple) pairs, found with numpy), one pick at a time up to ``ROUNDS`` picks, then
polished by a 1-swap local search (move a pick to another cell of its bin while that strictly
raises the objective). Above ``ROUNDS`` picks it runs ``ROUNDS`` rounds of ``ceil(k / ROUNDS)``
picks, each round water-filling its picks into the cheapest cells in cost order (the costs of
one round are those at its start: a round moves every count by a fraction of a percent). The
bins are filled in turn (the least-filled first), so every bin's picks see the counts of the
whole dataset. Ties break by a seeded rank of the cells; inside a cell the questions are a
seeded shuffle. The sum of marginals (rather than the joint) is the target because the joint
over eight dimensions is mostly unique tuples on real supplies: maximising it is a draw of
distinct tuples, which says nothing about any one dimension.
"""

from __future__ import annotations

import math

import numpy as np

ROUNDS = 1024  # picks per round = ceil(k / ROUNDS); bench/selection.py measures the effect
TRIES = 64  # cells the local search tries to move a pick from, and to


def _gain_table(n_max: int) -> np.ndarray:
    n = np.arange(n_max + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        nlogn = np.where(n > 0, n * np.log(np.maximum(n, 1)), 0.0)
    return np.append(nlogn[1:] - nlogn[:-1], np.inf)  # f(n) for n = 0..n_max; f(n_max) = inf


def _codes(items: list[dict], dimensions: tuple[str, ...]) -> np.ndarray:
    """[n_items, n_dims] dense codes of each dimension's values (first seen, first coded)."""
    out = np.empty((len(items), len(dimensions)), dtype=np.int64)
    for i, d in enumerate(dimensions):
        lut: dict = {}
        out[:, i] = np.fromiter(
            (lut.setdefault(it.get(d), len(lut)) for it in items), np.int64, len(items)
        )
    return out


def _cells(key: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Dense cell id per item, from its bin ``key`` [n] and its codes [n, D]; re-densified
    after every dimension, so the mixed radix never overflows."""
    for i in range(codes.shape[1]):
        key = np.unique(
            key * (int(codes[:, i].max(initial=0)) + 1) + codes[:, i], return_inverse=True
        )[1]
    return key.reshape(-1)


def _polish(
    picked: np.ndarray,
    supply: np.ndarray,
    bin_of: np.ndarray,
    vals: np.ndarray,
    counts: list[np.ndarray],
    f: np.ndarray,
    max_swaps: int,
) -> int:
    """1-swap local search after the greedy: inside a bin, move one pick from a cell to another
    while that strictly lowers ``sum_d sum_v F(n_dv)`` (the greedy fills the bins in turn and
    cannot see that a later bin has only one kind of question left). Candidates to give up a
    pick are tried from the one whose removal saves most. Updates ``picked`` and ``counts`` in
    place; returns the swaps made."""
    dims = range(len(counts))
    for swaps in range(max_swaps):
        have = np.flatnonzero(picked)
        saving = sum(f[counts[d][vals[have, d]] - 1] for d in dims)  # [A]: F drop on removal
        cost_now = sum(f[counts[d][vals[:, d]]] for d in dims)  # [C]: F rise on adding
        for a in have[np.argsort(-saving, kind="stable")][:TRIES]:
            to = np.flatnonzero((bin_of == bin_of[a]) & (picked < supply))
            to = to[to != a]
            if len(to) > TRIES:  # the cheapest cells now (a removal only lowers costs)
                to = to[np.argpartition(cost_now[to], TRIES - 1)[:TRIES]]
            if not len(to):
                continue
            for d in dims:
                counts[d][vals[a, d]] -= 1
            cost = sum(f[counts[d][vals[to, d]]] for d in dims)  # [B] after the removal
            b = int(to[np.argmin(cost)])
            gain = sum(f[counts[d][vals[a, d]]] for d in dims)  # what `a` gave up
            if cost.min() < gain - 1e-9:  # strictly better: sum F drops by gain - cost
                picked[a] -= 1
                picked[b] += 1
                for d in dims:
                    counts[d][vals[b, d]] += 1
                break
            for d in dims:
                counts[d][vals[a, d]] += 1
        else:
            return swaps
    return max_swaps


def max_entropy_pick(
    bins: dict[str, list[dict]],
    take: dict[str, int],
    dimensions: tuple[str, ...],
    seed: int,
) -> dict[str, list[dict]]:
    """``take[b]`` items of each ``bins[b]``, greedily maximising the sum over ``dimensions`` of
    the marginal entropy of the whole selection."""
    names = list(bins)
    items = [it for b in names for it in bins[b]]
    if not items:
        return {b: [] for b in bins}
    rng = np.random.default_rng(seed)
    bin_of_item = np.repeat(np.arange(len(names)), [len(bins[b]) for b in names])  # [n]
    codes = _codes(items, dimensions)  # [n, D]
    cell = _cells(bin_of_item, codes)  # [n]
    n_cells = int(cell.max()) + 1
    # cells renumbered in a seeded order: the lowest index wins a tie of costs
    rank = rng.permutation(n_cells)
    cell = rank[cell]
    # items grouped by cell, a seeded shuffle inside each cell
    shuffled = rng.permutation(len(items))
    order = shuffled[np.argsort(cell[shuffled], kind="stable")]  # [n]
    supply = np.bincount(cell, minlength=n_cells)  # [C]
    start = np.concatenate([[0], np.cumsum(supply)[:-1]])  # [C]
    first = order[start]  # one item of each cell
    vals = codes[first]  # [C, D]
    bin_of = bin_of_item[first]  # [C]
    total = sum(take.values())
    f = _gain_table(total + 1)
    counts = [np.zeros(int(codes[:, i].max()) + 1, dtype=np.int64) for i in range(codes.shape[1])]
    picked = np.zeros(n_cells, dtype=np.int64)  # [C]
    chunk = max(1, math.ceil(total / ROUNDS))
    members = [np.flatnonzero(bin_of == i) for i in range(len(names))]  # cells of each bin
    filled = dict.fromkeys(names, 0)
    take = dict(take)
    while True:
        open_bins = [b for b in names if filled[b] < take[b]]
        if not open_bins:
            break
        b = min(open_bins, key=lambda x: (filled[x] / take[x], names.index(x)))
        i = names.index(b)
        members[i] = idx = members[i][picked[members[i]] < supply[members[i]]]  # cells left
        if not len(idx):
            take[b] = filled[b]  # nothing left in this bin (the caller capped take by supply)
            continue
        need = min(chunk, take[b] - filled[b])
        cost = sum(f[counts[d][vals[idx, d]]] for d in range(len(counts)))  # [C_b]
        if need == 1:
            cheapest = idx[[int(np.argmin(cost))]]
        else:  # the `need` cheapest cells always hold `need` picks: sort only those
            few = np.argpartition(cost, need - 1)[:need] if need < len(idx) else np.arange(len(idx))
            cheapest = idx[few[np.lexsort((idx[few], cost[few]))]]
        left = supply[cheapest] - picked[cheapest]
        n = np.minimum(left, np.maximum(0, need - (np.cumsum(left) - left)))  # water-fill
        picked[cheapest] += n
        filled[b] += int(n.sum())
        for d in range(len(counts)):
            np.add.at(counts[d], vals[cheapest, d], n)
    if chunk == 1:
        _polish(picked, supply, bin_of, vals, counts, f, max_swaps=total)
    out: dict[str, list[dict]] = {b: [] for b in bins}
    for c in np.flatnonzero(picked):
        out[names[bin_of[c]]] += [items[j] for j in order[start[c] : start[c] + picked[c]]]
    return out
