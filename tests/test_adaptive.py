"""Adaptive difficulty in training: the sampler retires questions the policy has mastered, backs
off the ones it keeps failing, draws along the pyramid and survives a resume; then the same on
the nano policy's real GRPO-TCR run."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from trainer.adaptive import AdaptiveConfig, AdaptiveSampler, merge_stats

CFG = AdaptiveConfig()  # window 2, back-off 2 steps doubling, the 30/50/20 pyramid


def _rows(rates: list[float], domains: str = "m") -> list[dict]:
    return [
        {"question_id": f"q{i}", "pass_rate": p, "domain": domains[i % len(domains)]}
        for i, p in enumerate(rates)
    ]


def _step(s: AdaptiveSampler, step: int, n: int, outcome) -> list[str]:
    """One training step of the sampler: draw ``n``, report ``outcome(qid) -> n_correct of 8``."""
    s.begin(step)
    drawn = s.take(n)
    for r in drawn:
        s.observe(r, outcome(r["question_id"]), 8)
    return [r["question_id"] for r in drawn]


def test_a_question_retires_once_its_tracked_pass_rate_reaches_one():
    rows = _rows([0.5, 0.5, 0.5])
    s = AdaptiveSampler(rows, CFG, seed=0)
    solved = lambda q: 8 if q == "q0" else 4  # noqa: E731
    assert "q0" in _step(s, 0, 3, solved)
    assert s.tracked(0) == pytest.approx(0.75)  # the label (0.5) and one all-correct group
    assert s.bin_of(0) == "easy" and s.stats()["drawn"] == {"medium": 3}  # bins when drawn
    assert s.stats()["retired"] == 0
    _step(s, 1, 3, solved)
    assert s.tracked(0) == 1.0 and s.retired[0] and s.stats()["retired_now"] == ["q0"]
    for step in range(2, 8):  # never drawn again, though the others are drawn every step
        assert sorted(_step(s, step, 3, solved)) == ["q1", "q2"]
    assert s.drawn[0] == 2 and s.drawn[1] == s.drawn[2] == 8


def test_an_all_wrong_question_backs_off_doubling_and_returns_when_it_recovers():
    rows = _rows([0.25, 0.5, 0.5, 0.5])
    s = AdaptiveSampler(rows, CFG, seed=0)
    failing = {"q0"}
    seen = {step: _step(s, step, 4, lambda q: 0 if q in failing else 4) for step in range(2)}
    assert all("q0" in d for d in seen.values())
    # [0.25, 0] then [0, 0]: the second all-wrong group backs it off for 2 steps
    assert s.tracked(0) == 0.0 and s.stats()["backed_off_now"] == ["q0"]
    assert s.resume_at[0] == 1 + 1 + 2
    assert "q0" not in _step(s, 2, 4, lambda q: 4) and "q0" not in _step(s, 3, 4, lambda q: 4)
    assert "q0" in _step(s, 4, 4, lambda q: 0 if q in failing else 4)  # back, fails again
    assert s.resume_at[0] == 4 + 1 + 4  # the second back-off in a row waits twice as long
    failing.clear()
    for step in range(5, 9):
        assert "q0" not in _step(s, step, 4, lambda q: 4)
    assert "q0" in _step(s, 9, 4, lambda q: 4)  # recovered: [0, 0.5]
    assert s.tracked(0) == 0.25 and s.backoffs[0] == 0 and s.bin_of(0) == "hard"


def test_the_draw_follows_the_pyramid_while_every_bin_has_questions():
    rates = [0.875] * 40 + [0.5] * 40 + [0.125] * 40  # easy, medium, hard
    s = AdaptiveSampler(_rows(rates), CFG, seed=3)
    drawn = Counter()
    for step in range(10):
        s.begin(step)
        drawn.update(s.bin_of(rates.index(r["pass_rate"])) for r in s.take(10))
    assert drawn == {"easy": 30, "medium": 50, "hard": 20}
    assert merge_stats([s.stats()])["adaptive_drawn"] == {"easy": 3, "medium": 5, "hard": 2}


def test_the_band_empties_then_backed_off_questions_are_drawn_rather_than_none():
    s = AdaptiveSampler(_rows([0.125, 0.125]), CFG, seed=0)
    for step in range(2):
        _step(s, step, 2, lambda q: 0)
    assert s.stats()["backed_off"] == 2
    s.begin(2)
    assert len(s.take(2)) == 2  # both waiting: drawn anyway, soonest first
    for i in range(2):
        s.retired[i] = True
    assert s.exhausted() and s.take(2) == []


def test_a_restored_sampler_draws_exactly_what_the_original_draws():
    rates = [0.875, 0.5, 0.125, 0.75, 0.375, 0.25] * 4
    outcome = lambda q: (int(q[1:]) * 5) % 9  # noqa: E731  (0..8 correct, fixed per question)
    a = AdaptiveSampler(_rows(rates), CFG, seed=1)
    for step in range(4):
        _step(a, step, 6, outcome)
    b = AdaptiveSampler(_rows(rates), CFG, seed=1)
    b.load(json.loads(json.dumps(a.state())))
    assert [_step(a, st, 6, outcome) for st in range(4, 9)] == [
        _step(b, st, 6, outcome) for st in range(4, 9)
    ]
    with pytest.raises(ValueError, match="other questions"):
        AdaptiveSampler(_rows(rates[:-1]), CFG, seed=1).load(a.state())


def test_the_live_stats_of_two_ranks_merge_into_one_pyramid_and_entropy():
    one = AdaptiveSampler(_rows([0.875, 0.5], "ab"), CFG, seed=0)
    two = AdaptiveSampler(_rows([0.5, 0.125], "cd"), CFG, seed=0)
    m = merge_stats([one.stats(), two.stats()])
    assert m["adaptive_pool"] == {"easy": 1, "medium": 2, "hard": 1}
    assert m["adaptive_pyramid"] == {"easy": 0.25, "medium": 0.5, "hard": 0.25}
    assert m["adaptive_entropy_bits"] == 2.0  # four questions, four (domain, ...) tuples


def _nano_pool() -> list[dict]:
    """Four one-product questions the nano policy was trained on the like of, and four
    three-number word problems it never saw; all labelled 4/8."""
    from pipeline.demo.nano import tasks

    return [
        {"question_id": f"L{t.level}-{i}", "question": t.question, "ground_truth": str(t.answer),
         "answer_type": "integer", "pass_rate": 0.5, "domain": f"level{t.level}"}
        for i, t in enumerate(tasks(4, seed=5, levels=(1,)) + tasks(4, seed=6, levels=(3,)))
    ]  # fmt: skip


def _adaptive_run(policy, out, steps: int) -> tuple[list[dict], list[list[str]]]:
    """GRPO-TCR with adaptive difficulty on the nano pool: (metrics, question ids per step)."""
    from tests.conftest import NANO_AGENT
    from trainer.episodes import default_reward
    from trainer.train import TrainConfig, train

    cfg = TrainConfig(
        model=str(policy), out=str(out), steps=steps, prompts_per_step=4, group_size=4, lr=1e-4,
        max_tokens=48, agent=NANO_AGENT, rollout_backend="transformers", use_overlong=False,
        temperature=0.3, adaptive=True,
    )  # fmt: skip
    score, seen, per_step = default_reward(cfg), [], []

    def reward(e, q):  # the trainer's own reward, noting which question each episode answered
        seen.append(q["question_id"])
        return score(e, q)

    def on_step(m):
        per_step.append(sorted(set(seen)))
        seen.clear()

    return train(cfg, _nano_pool(), reward, on_step=on_step), per_step


def test_grpo_tcr_retires_what_the_nano_policy_masters_and_resumes_its_sampler(nano_sft, tmp_path):
    """The SFT policy solves the one-product questions nearly every time at temperature 0.3:
    they retire after two all-correct groups and are never drawn again; word problems it keeps
    failing back off. A run stopped after 3 steps and resumed draws what the straight run drew."""
    policy, _ = nano_sft
    hist, drawn = _adaptive_run(policy, tmp_path / "straight", 6)
    assert [h["step"] for h in hist] == [1, 2, 3, 4, 5, 6]
    retired_at = {q: h["step"] for h in hist for q in h["adaptive_retired_now"]}
    assert retired_at, [h["adaptive_pool"] for h in hist]  # something was mastered
    assert all(q.startswith("L1-") for q in retired_at)  # and only what the policy can do
    for q, step in retired_at.items():
        assert all(q not in d for d in drawn[step:]), (q, step, drawn)  # never drawn again
    backed = {q: h["step"] for h in hist for q in h["adaptive_backed_off_now"]}
    assert any(q.startswith("L3-") for q in backed)
    for q, step in backed.items():  # it sits out the next 2 steps (its first back-off)...
        for h, d in zip(hist[step : step + 2], drawn[step : step + 2], strict=False):
            assert q not in d or h["adaptive_drew_backed_off"], (q, step, drawn)
    # ...unless nothing else is in play: then the soonest backed-off questions are drawn
    fell_back = [h["step"] for h in hist if h["adaptive_drew_backed_off"]]
    for step in fell_back:
        assert sum(hist[step - 2]["adaptive_pool"].values()) == 0, (step, hist[step - 2])
    for h in hist:  # every question is in play, backed off or retired
        pool = sum(h["adaptive_pool"].values())
        assert pool + h["adaptive_backed_off"] + h["adaptive_retired"] == 8
        assert h["adaptive_pyramid"] == {
            b: round(n / pool, 4) if pool else 0.0 for b, n in h["adaptive_pool"].items()
        }
        assert 0.0 <= h["adaptive_entropy_bits"] <= 1.0  # two kinds of question (domain)
    assert hist[0]["adaptive_entropy_bits"] == 1.0  # 4 + 4 in play: nothing tracked twice yet
    logged = [json.loads(x) for x in (tmp_path / "straight/metrics.jsonl").read_text().splitlines()]
    assert [m["adaptive_pool"] for m in logged] == [h["adaptive_pool"] for h in hist]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(tmp_path / "straight/tb"))
    tb.Reload()  # the live pyramid as one curve per bin, beside the entropy
    assert {"adaptive_pyramid/easy", "adaptive_pool/hard", "adaptive_entropy_bits"} <= set(
        tb.Tags()["scalars"]
    )

    first, d1 = _adaptive_run(policy, tmp_path / "resumed", 3)
    second, d2 = _adaptive_run(policy, tmp_path / "resumed", 6)  # from checkpoint-latest
    assert d1 + d2 == drawn
    keys = ("adaptive_pool", "adaptive_retired_now", "adaptive_backed_off_now", "accuracy")
    assert [{k: h.get(k) for k in keys} for h in first + second] == [
        {k: h.get(k) for k in keys} for h in hist
    ]


def test_on_a_dataset_built_from_the_shared_data_the_sampler_starts_from_the_builds_bins(
    shared_dataset,
):
    """A dataset built with its own bins and pyramid: the sampler reads them from the manifest,
    and every real RL row starts in the bin the build put it in (its labelled pass rate)."""
    import pyarrow.dataset as pads

    from pipeline.build import BuildConfig, build
    from pipeline.build.select import SelectConfig

    lake, _ = shared_dataset
    own = SelectConfig(targets=(0.2, 0.5, 0.3), hard_max=0.25, easy_min=0.75)
    manifest = build(lake, BuildConfig(name="adaptive", label_source="recorded", select=own))
    cfg = AdaptiveConfig.for_dataset(manifest["path"], window=3)
    assert (cfg.targets, cfg.hard_max, cfg.easy_min, cfg.window) == (
        (0.2, 0.5, 0.3),
        0.25,
        0.75,
        3,
    )
    rows = pads.dataset(f"{manifest['path']}/rl", format="parquet").to_table().to_pylist()
    s = AdaptiveSampler(rows, cfg, seed=0)
    assert len(rows) > 100 and [s.bin_of(i) for i in range(len(rows))] == [
        r["difficulty"] for r in rows
    ]
    pool = merge_stats([s.stats()])["adaptive_pool"]
    assert {b: n for b, n in pool.items() if n} == Counter(r["difficulty"] for r in rows)
