"""Adaptive difficulty during training: the prompt stream that keeps sampling near the
difficulty band as the policy learns.

Each question's *tracked pass rate* is the mean of its last ``window`` group accuracies, the
labelled pass rate (the dataset's ``pass_rate``, K rollouts of the SFT policy) counting as its
first group. Every step:

* a question whose tracked rate reaches 1.0 **retires**: the policy solves it every time, its
  groups carry no gradient, and it is never drawn again;
* a question whose tracked rate is 0.0 (it stayed all-wrong) **backs off** for
  ``backoff_steps * 2**(n-1)`` steps at its n-th consecutive back-off (capped at
  ``max_backoff_steps``), then is tried again; a group with any correct answer resets n;
* the questions drawn follow the pyramid ``targets`` (easy/medium/hard by the tracked rate, the
  build's bins): each pick goes to the bin furthest below its share of all picks so far, and
  inside a bin to the least-drawn question (ties by a seeded rank). A step draws fewer than
  asked when too few questions are in play; when none is, the soonest backed-off ones are drawn
  rather than none.

The live pyramid (of the pool still in play, and of this step's draw) and the joint entropy (bits)
of the pool's features are logged every step. The whole state is plain lists, saved in the
checkpoint and restored on resume; under torch.distributed each rank runs its own sampler over
its share of the questions (``rows[rank::world]``).
"""

from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from pipeline.build.select import BINS, SelectConfig, difficulty
from pipeline.diversity.measure import bits_of_counts


@dataclass(frozen=True)
class AdaptiveConfig:
    window: int = 2
    """Groups a question's tracked pass rate averages over (the label is the first)."""
    targets: tuple[float, float, float] = (0.3, 0.5, 0.2)
    """Easy, medium, hard: the paper's."""
    hard_max: float = 0.3
    """The bins of pipeline.build.select (the dataset's own when it has them)."""
    easy_min: float = 0.7
    """Pass rates from this are easy."""
    backoff_steps: int = 2
    """Steps an all-wrong question first sits out; doubled at each further all-wrong group."""
    max_backoff_steps: int = 64
    """The longest back-off."""
    dimensions: tuple[str, ...] = ("domain", "source", "tool_pattern")
    """Of the live entropy."""

    def __post_init__(self) -> None:
        if self.window < 1 or self.backoff_steps < 1 or self.max_backoff_steps < 1:
            raise ValueError("adaptive window and back-off steps must be at least 1")
        if any(t < 0 for t in self.targets) or not sum(self.targets):
            raise ValueError(f"adaptive targets must be shares >= 0, not {self.targets}")

    @classmethod
    def for_dataset(cls, dataset: str | None, **kw) -> AdaptiveConfig:
        """The bins and pyramid the dataset was built with (its manifest), else the paper's."""
        from pathlib import Path

        manifest = Path(dataset) / "manifest.json" if dataset else None
        if manifest is not None and manifest.exists():
            sel = json.loads(manifest.read_text()).get("config", {}).get("select", {})
            for name in ("hard_max", "easy_min"):
                if name in sel:
                    kw.setdefault(name, sel[name])
            if "targets" in sel:
                kw.setdefault("targets", tuple(sel["targets"]))
        return cls(**kw)


class AdaptiveSampler:
    """The trainer's prompt stream with adaptive difficulty: ``begin(step)``, ``take(n)``, then
    ``observe(row, n_correct, k)`` for every group of the step, then ``stats()``."""

    def __init__(self, rows: list[dict], config: AdaptiveConfig, seed: int):
        self.rows, self.config = rows, config
        self.select = SelectConfig(hard_max=config.hard_max, easy_min=config.easy_min)
        n = len(rows)
        self.tiebreak = np.random.default_rng(seed).permutation(n)  # a seeded rank
        self.index = {id(r): i for i, r in enumerate(rows)}
        self.history: list[list[float]] = [
            [float(r["pass_rate"])] if r.get("pass_rate") is not None else [] for r in rows
        ]
        self.retired = [False] * n
        self.backoffs = [0] * n  # consecutive back-offs
        self.resume_at = [0] * n  # the step a backed-off question is drawn again
        self.drawn = [0] * n
        self.drawn_bins = dict.fromkeys(BINS, 0)
        self.step = 0
        self.this_step: list[int] = []
        self.drawn_as: list[str] = []  # the bin of each question of this step when drawn
        self.retired_now: list[str] = []
        self.backed_off_now: list[str] = []
        self.fell_back = False  # this step drew backed-off questions (none was in play)

    # ---- the tracked pass rate ------------------------------------------------------------
    def tracked(self, i: int) -> float | None:
        h = self.history[i][-self.config.window :]
        return sum(h) / len(h) if h else None

    def bin_of(self, i: int) -> str:
        """easy | medium | hard by the tracked rate (a question with none counts as medium)."""
        p = self.tracked(i)
        return "medium" if p is None else (difficulty(p, self.select) or "medium")

    def in_play(self, i: int) -> bool:
        return not self.retired[i] and self.resume_at[i] <= self.step

    # ---- the stream ------------------------------------------------------------------------
    def begin(self, step: int) -> None:
        self.step, self.this_step, self.drawn_as = step, [], []
        self.retired_now, self.backed_off_now = [], []
        self.fell_back = False

    def take(self, n: int) -> list[dict]:
        """Up to ``n`` questions not yet drawn this step, following the pyramid: fewer when
        fewer are in play, backed-off ones only when none is, none once every one retired."""
        taken = set(self.this_step)
        fresh = [i for i in range(len(self.rows)) if not self.retired[i] and i not in taken]
        ready = [i for i in fresh if self.resume_at[i] <= self.step]
        queues: dict[str, deque[int]] = {b: deque() for b in BINS}
        for i in sorted(ready, key=lambda i: (self.drawn[i], self.tiebreak[i])):
            queues[self.bin_of(i)].append(i)
        # none in play this step: the soonest backed-off questions rather than an empty step
        waiting = (
            sorted(fresh, key=lambda i: (self.resume_at[i], self.drawn[i], self.tiebreak[i]))
            if not ready and not taken
            else []
        )
        share = dict(zip(BINS, self.config.targets, strict=True))
        total = sum(share.values())
        out: list[int] = []
        for _ in range(n):
            open_bins = [b for b in BINS if queues[b]]
            if open_bins:  # the bin furthest below its share of every pick so far
                picks = sum(self.drawn_bins.values()) + 1
                b = max(
                    open_bins,
                    key=lambda b: (share[b] / total * picks - self.drawn_bins[b], -BINS.index(b)),
                )
                i = queues[b].popleft()
            elif waiting:
                i = waiting.pop(0)
                self.fell_back = True
                b = self.bin_of(i)
            else:
                break
            self.drawn_bins[b] += 1
            self.drawn[i] += 1
            self.drawn_as.append(b)
            out.append(i)
        self.this_step += out
        return [self.rows[i] for i in out]

    def observe(self, row: dict, n_correct: int, k: int) -> None:
        """One group's outcome for ``row`` (a dict ``take`` returned)."""
        i = self.index[id(row)]
        self.history[i] = (self.history[i] + [n_correct / k])[-self.config.window :]
        p = self.tracked(i)
        qid = str(row.get("question_id", i))
        if p >= 1.0:
            self.retired[i] = True
            self.retired_now.append(qid)
        elif p <= 0.0:
            self.backoffs[i] += 1
            wait = self.config.backoff_steps * 2 ** (self.backoffs[i] - 1)
            self.resume_at[i] = self.step + 1 + min(wait, self.config.max_backoff_steps)
            self.backed_off_now.append(qid)
        elif n_correct > 0:
            self.backoffs[i] = 0

    def exhausted(self) -> bool:
        return all(self.retired)

    # ---- what is logged --------------------------------------------------------------------
    def stats(self) -> dict:
        """This sampler's counts (``merge_stats`` turns one per rank into the logged metrics)."""
        play = [i for i in range(len(self.rows)) if self.in_play(i)]
        dims = self.config.dimensions
        return {
            "pool": Counter(self.bin_of(i) for i in play),
            "drawn": Counter(self.drawn_as),
            "retired": sum(self.retired),
            "backed_off": sum(1 for i in range(len(self.rows)) if not self.retired[i]) - len(play),
            "features": Counter(tuple(self.rows[i].get(d) for d in dims) for i in play),
            "retired_now": list(self.retired_now),
            "backed_off_now": list(self.backed_off_now),
            "fell_back": self.fell_back,
        }

    # ---- checkpoint ------------------------------------------------------------------------
    def state(self) -> str:
        """JSON text (a checkpoint holds it as a string: ``weights_only`` loads it)."""
        return json.dumps(
            {
                "question_ids": [str(r.get("question_id", i)) for i, r in enumerate(self.rows)],
                "history": self.history,
                "retired": self.retired,
                "backoffs": self.backoffs,
                "resume_at": self.resume_at,
                "drawn": self.drawn,
                "drawn_bins": self.drawn_bins,
            }
        )

    def load(self, text: str) -> None:
        s = json.loads(text)
        ids = [str(r.get("question_id", i)) for i, r in enumerate(self.rows)]
        if s["question_ids"] != ids:
            raise ValueError(
                "the checkpoint's adaptive sampler tracked other questions than this dataset "
                "holds: resume with the dataset the run started on, or start a new --out"
            )
        for name in ("history", "retired", "backoffs", "resume_at", "drawn", "drawn_bins"):
            setattr(self, name, s[name])


def merge_stats(parts: list[dict]) -> dict:
    """The step's adaptive metrics from every rank's ``stats()``: the live pyramid of the pool
    still in play (counts and shares) and of this step's draw, the pool's joint feature entropy
    in bits, the retired and backed-off counts, and the questions that retired or backed off
    this step."""
    pool = sum((p["pool"] for p in parts), Counter())
    n = sum(pool.values())
    return {
        "adaptive_pool": {b: pool[b] for b in BINS},
        "adaptive_pyramid": {b: round(pool[b] / n, 4) if n else 0.0 for b in BINS},
        "adaptive_drawn": {b: sum(p["drawn"][b] for p in parts) for b in BINS},
        "adaptive_entropy_bits": round(
            bits_of_counts(sum((p["features"] for p in parts), Counter()).values()), 4
        ),
        "adaptive_retired": sum(p["retired"] for p in parts),
        "adaptive_backed_off": sum(p["backed_off"] for p in parts),
        "adaptive_retired_now": [q for p in parts for q in p["retired_now"]],
        "adaptive_backed_off_now": [q for p in parts for q in p["backed_off_now"]],
        # none was in play: this step drew the soonest backed-off questions instead
        "adaptive_drew_backed_off": any(p["fell_back"] for p in parts),
    }
