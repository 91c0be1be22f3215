"""RL selection: drop questions every rollout solves or none solves, bin the rest by pass rate,
and rebalance to a difficulty pyramid, sampling each bin for diversity.

Bins (any K): hard ``0 < p <= hard_max``, medium ``hard_max < p < easy_min``, easy
``easy_min <= p < 1``; the defaults (0.3, 0.7) give, for K=8, hard 1–2/8, medium 3–5/8,
easy 6–7/8. The largest dataset meeting the target ratios is
``N = min(n_bin / ratio_bin)``; a requested size above it is reported as a shortfall per bin,
never silently filled. Inside the bins' quotas the questions are chosen for diversity:

* ``objective="entropy"`` (default): the greedy of ``pipeline.diversity.objective`` maximises
  the sum of the marginal entropies of the feature dimensions (``diversity.dimensions``: domain,
  source, tool pattern and the behaviour features of the feature store) over the whole dataset;
* ``objective="strata"``: each item is drawn from the stratum (``strata``) with the fewest
  picks so far (the earlier selection, kept as the baseline of bench/selection.py).

Ties break by a seeded shuffle: the same supply and seed give the same selection. The report
holds the diversity profile (bits per dimension and joint) of the supply and of the selection,
and a warning naming the short dimensions when the joint misses ``diversity.target_bits``.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field

from pipeline.diversity.config import DiversityConfig
from pipeline.diversity.measure import bits, profile, verdict
from pipeline.diversity.objective import max_entropy_pick

BINS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class SelectConfig:
    targets: tuple[float, float, float] = (0.3, 0.5, 0.2)
    """Easy, medium, hard."""
    hard_max: float = 0.3
    """Pass rates up to this are hard (1-2 of 8 by default)."""
    easy_min: float = 0.7
    """Pass rates from this are easy (6-7 of 8 by default); between the two, medium."""
    size: int | None = None
    """Requested RL size (default: the largest that meets the ratios)."""
    seed: int = 0
    """Seed of the draw within each bin."""
    objective: str = "entropy"
    """entropy: maximise the feature dimensions' entropy inside the pyramid | strata: draw evenly
    over (domain, source, tool pattern).
    """
    strata: tuple[str, ...] = ("domain", "source", "tool_pattern")
    """The strata of objective=strata."""
    diversity: DiversityConfig = field(default_factory=DiversityConfig)
    """The diversity measure and its warning threshold."""

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 1:
            raise ValueError(
                f"size must be at least 1, got {self.size} (leave it out for the largest size "
                "that meets the ratios)"
            )
        if self.objective not in ("entropy", "strata"):
            raise ValueError(f"objective must be entropy or strata, not {self.objective!r}")


def difficulty(pass_rate: float, config: SelectConfig) -> str | None:
    """easy | medium | hard, or None for 0/K and K/K (no gradient for GRPO)."""
    if pass_rate <= 0 or pass_rate >= 1:
        return None
    if pass_rate <= config.hard_max:
        return "hard"
    return "easy" if pass_rate >= config.easy_min else "medium"


def pass_rate_bin(pass_rate: float, config: SelectConfig) -> str:
    """``difficulty``, with the two ends named: all wrong (0/K) and all right (K/K)."""
    if pass_rate <= 0:
        return "all wrong"
    if pass_rate >= 1:
        return "all right"
    return difficulty(pass_rate, config)


entropy = bits  # Shannon entropy (bits) of a list of labels


def _stratified(items: list[dict], k: int, keys: tuple[str, ...], rng: random.Random) -> list[dict]:
    """k items, drawing each time from the least-picked stratum (diversity first)."""
    strata: dict[tuple, list[dict]] = {}
    for it in items:
        strata.setdefault(tuple(it.get(s) for s in keys), []).append(it)
    for v in strata.values():
        rng.shuffle(v)
    order = sorted(strata)
    rng.shuffle(order)
    heap = [(0, rank, s) for rank, s in enumerate(order)]  # (picked so far, seeded rank, stratum)
    heapq.heapify(heap)
    out: list[dict] = []
    while len(out) < k and heap:
        picked, rank, s = heapq.heappop(heap)
        out.append(strata[s].pop())
        if strata[s]:
            heapq.heappush(heap, (picked + 1, rank, s))
    return out


@dataclass
class Selection:
    rows: list[dict]
    report: dict = field(default_factory=dict)


def select(items: list[dict], config: SelectConfig | None = None) -> Selection:
    """``items``: dicts with question_id, pass_rate and the strata keys. Returns the selected
    rows (with a ``difficulty`` key) in a deterministic order, and a report."""
    config = config or SelectConfig()
    rng = random.Random(config.seed)
    binned: dict[str, list[dict]] = {b: [] for b in BINS}
    dropped = Counter()
    for it in sorted(items, key=lambda x: x["question_id"]):
        d = difficulty(it["pass_rate"], config)
        if d is None:
            dropped["all_correct" if it["pass_rate"] >= 1 else "all_wrong"] += 1
            continue
        binned[d].append(it | {"difficulty": d})
    supply = {b: len(v) for b, v in binned.items()}
    ratios = dict(zip(BINS, config.targets, strict=True))
    largest = min((supply[b] / ratios[b] for b in BINS if ratios[b] > 0), default=0)
    n = config.size if config.size is not None else int(largest)
    want = {b: round(n * ratios[b]) for b in BINS}
    short = {b: {"have": supply[b], "need": want[b]} for b in BINS if supply[b] < want[b]}
    take = {b: min(want[b], supply[b]) for b in BINS}
    rows = []
    if config.objective == "entropy":
        picked = max_entropy_pick(binned, dict(take), config.diversity.dimensions, config.seed)
        rows = [r for b in BINS for r in picked[b]]
    else:
        for b in BINS:
            rows += _stratified(binned[b], take[b], config.strata, rng)
    rows.sort(key=lambda r: (BINS.index(r["difficulty"]), r["question_id"]))
    total = len(rows)
    before = [
        it | {"difficulty": difficulty(it["pass_rate"], config)}
        for it in items
        if difficulty(it["pass_rate"], config)
    ]
    report = {
        "input_questions": len(items),
        "dropped": dict(dropped),
        "supply": supply,
        "largest_size_meeting_ratios": int(largest),
        "requested_size": config.size,
        "selected": {b: take[b] for b in BINS},
        "pyramid": {b: round(take[b] / total, 4) if total else 0.0 for b in BINS},
        "targets": ratios,
        "short_bins": short,
        "entropy_before": {
            s: round(entropy([it.get(s) for it in before]), 4) for s in config.strata
        },
        "entropy_after": {s: round(entropy([r.get(s) for r in rows]), 4) for s in config.strata},
        "diversity": diversity(before, rows, config.diversity),
    }
    return Selection(rows, report)


def no_pyramid(report: dict) -> list[str]:
    """Why a selection with mixed questions came out empty: a bin the targets ask for is empty,
    so the largest dataset meeting the ratios has no question."""
    supply, targets = report["supply"], report["targets"]
    empty = [b for b, share in targets.items() if share > 0 and supply[b] == 0]
    if report["requested_size"] is not None or not empty or not sum(supply.values()):
        return []
    return [
        f"no {'/'.join(str(round(100 * t)) for t in targets.values())} pyramid fits the labels: "
        f"the {' and '.join(empty)} bin{'s are' if len(empty) > 1 else ' is'} empty (supply "
        f"{supply}), so the RL split is empty; ask for a size (--size N: each bin gives its "
        "share or what it has), label more questions, or change the targets"
    ]


def diversity(supply: list[dict], rows: list[dict], config: DiversityConfig) -> dict:
    """The diversity section of the report: the supply's and the selection's profiles, and the
    verdict against the target."""
    have, got = profile(supply, config), profile(rows, config)
    return {"dimensions": list(config.dimensions), "supply": have, "selected": got} | verdict(
        got, have, config
    )
