"""Dataset builds from recorded labels on the shared data: pyramid, counts, checksums,
determinism, short bins, versions, exports loadable by their targets' loaders."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from pipeline.build import BuildConfig, build, check_name
from pipeline.build.select import SelectConfig, difficulty, no_pyramid, select


@pytest.fixture(scope="module")
def built(shared_dataset):
    lake, m1 = shared_dataset
    m2 = build(lake, BuildConfig(name="shared", label_source="recorded"))
    m3 = build(
        lake, BuildConfig(name="shared", label_source="recorded", select=SelectConfig(seed=1))
    )
    return lake, m1, m2, m3


def test_pyramid_within_two_points_of_30_50_20(built):
    _, m, _, _ = built
    rl = m["rl"]
    assert rl["rows"] > 300 and not rl["short_bins"]
    for b, target in (("easy", 0.3), ("medium", 0.5), ("hard", 0.2)):
        assert abs(rl["pyramid"][b] - target) <= 0.02
    assert set(rl["dropped"]) == {"all_correct", "all_wrong", "unverifiable_environment_outcome"}
    assert rl["input_questions"] == sum(rl["dropped"].values()) + sum(rl["supply"].values())


def test_rl_rows_are_only_those_an_exported_reward_can_verify(built):
    """tau-bench's trials carry the environment's expected actions as ground truth: no exported
    reward scores an honest answer against them (echoing the JSON would score 1), so they are
    left out of RL with a reason; math rows stay, and compute_score verifies their answers."""
    from pipeline.exports.rewards import compute_score

    _, m, _, _ = built
    assert m["rl"]["dropped"]["unverifiable_environment_outcome"] > 0
    con = duckdb.connect()
    rows = con.sql(
        f"SELECT source, ground_truth, answer_type FROM read_parquet('{m['path']}/rl/*.parquet')"
    ).fetchall()
    assert rows and not any(
        src == "tau_bench" or gt.lstrip().startswith("{") for src, gt, _ in rows
    )
    honest = [
        compute_score(None, f"\\boxed{{{gt}}}", gt, {"answer_type": t}) for _, gt, t in rows[:50]
    ]
    assert sum(honest) >= 45, honest  # the exported reward verifies their own answers


def test_manifest_counts_equal_duckdb_counts_and_sha256_verify(built):
    _, m, _, _ = built
    root = Path(m["path"])
    for rel, meta in m["files"].items():
        data = (root / rel).read_bytes()
        assert hashlib.sha256(data).hexdigest() == meta["sha256"] and len(data) == meta["bytes"]
    con = duckdb.connect()
    rl = con.sql(
        f"SELECT count(*), count(*) FILTER (WHERE difficulty = 'easy') FROM read_parquet('{root}/rl/*.parquet')"
    ).fetchall()[0]
    assert rl == (m["rl"]["rows"], m["rl"]["selected"]["easy"])
    sft = con.sql(f"SELECT count(*) FROM read_parquet('{root}/sft/*.parquet')").fetchall()[0][0]
    assert sft == m["sft"]["rows"] > 0
    bad = con.sql(
        f"SELECT count(*) FROM read_parquet('{root}/sft/*.parquet') WHERE NOT f_correct OR NOT f_complete"
    ).fetchall()[0][0]
    assert bad == 0
    assert json.loads((root / "manifest.json").read_text())["files"] == m["files"]


def test_two_builds_are_byte_identical_and_versions_never_overwritten(built):
    lake, m1, m2, m3 = built
    # the rebuild computed every shard and export again: same sha256, so nothing is published
    assert m2["unchanged"] and m2["version"] == 1 and m1["files"] == m2["files"]
    assert not m1["unchanged"] and not lake.fs.exists(lake.path("datasets", "shared", "v3"))
    # another seed selects other questions: a new version beside v1, which stays as it was
    assert m3["version"] == 2 and not m3["unchanged"] and m3["files"] != m1["files"]
    v1 = json.loads(Path(m1["path"], "manifest.json").read_text())
    assert v1["files"] == m1["files"]
    with pytest.raises(ValueError):
        check_name("../escape")


def test_short_bin_is_reported_not_filled():
    items = [
        {
            "question_id": f"q{i}",
            "pass_rate": p,
            "domain": "math",
            "source": "s",
            "tool_pattern": "none",
        }
        for i, p in enumerate([0.125] * 2 + [0.5] * 50 + [0.875] * 50)
    ]
    sel = select(items, SelectConfig(size=100))
    assert sel.report["short_bins"] == {"hard": {"have": 2, "need": 20}}
    assert sel.report["selected"]["hard"] == 2 and sel.report["largest_size_meeting_ratios"] == 10


def test_an_empty_bin_leaves_no_pyramid_and_says_so_unless_a_size_is_asked():
    """The CI mission's 64 labels once held no hard question: the largest 30/50/20 pyramid was
    empty, silently. Now a warning names the empty bin; a requested size takes the other bins'
    shares and reports the empty one as short."""
    items = [
        {"question_id": f"q{i}", "pass_rate": p, "domain": "m", "source": "s", "tool_pattern": "x"}
        for i, p in enumerate([0.5] * 15 + [0.875] * 33 + [1.0] * 6)
    ]
    sel = select(items)
    assert sel.rows == [] and sel.report["largest_size_meeting_ratios"] == 0
    (warning,) = no_pyramid(sel.report)
    assert "the hard bin is empty" in warning and "--size" in warning
    sized = select(items, SelectConfig(size=16))
    assert sized.report["selected"] == {"easy": 5, "medium": 8, "hard": 0}
    assert sized.report["short_bins"] == {"hard": {"have": 0, "need": 3}}
    assert no_pyramid(sized.report) == [] and len(sized.rows) == 13
    assert no_pyramid(select(items[:0]).report) == []  # nothing mixed: nothing to explain


def test_bins_generalize_to_any_k():
    cfg = SelectConfig()
    assert [difficulty(i / 8, cfg) for i in range(9)] == [
        None,
        "hard",
        "hard",
        "medium",
        "medium",
        "medium",
        "easy",
        "easy",
        None,
    ]
    assert [difficulty(i / 4, cfg) for i in range(5)] == [None, "hard", "medium", "easy", None]


def test_stratified_sampling_raises_diversity():
    items = [
        {
            "question_id": f"a{i}",
            "pass_rate": 0.5,
            "domain": "math",
            "source": "big",
            "tool_pattern": "none",
        }
        for i in range(90)
    ]
    items += [
        {
            "question_id": f"b{i}",
            "pass_rate": 0.5,
            "domain": "code",
            "source": "small",
            "tool_pattern": "multi",
        }
        for i in range(10)
    ]
    sel = select(items, SelectConfig(targets=(0.0, 1.0, 0.0), size=20))
    assert sum(r["domain"] == "code" for r in sel.rows) == 10
    assert sel.report["entropy_after"]["domain"] > sel.report["entropy_before"]["domain"]


def test_exports_load_with_hugging_face_datasets(built):
    datasets = pytest.importorskip("datasets")
    _, m, _, _ = built
    ex = Path(m["path"]) / "exports"
    verl = datasets.load_dataset("parquet", data_files=str(ex / "verl.parquet"), split="train")
    row = verl[0]
    assert set(verl.column_names) == {
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "agent_name",
        "extra_info",
    }
    assert row["reward_model"]["style"] == "rule" and row["prompt"][-1]["role"] == "user"
    grpo = datasets.load_dataset("parquet", data_files=str(ex / "trl_grpo.parquet"), split="train")
    assert grpo[0]["prompt"][0]["role"] == "system" and "ground_truth" in grpo.column_names
    # every tool's arguments are dicts of their own keys: `datasets` keeps them apart (no union
    # of keys across tools filled with nulls)
    loaded = datasets.load_dataset("json", data_files=str(ex / "trl_sft.jsonl"), split="train")
    sft = [json.loads(line) for line in (ex / "trl_sft.jsonl").read_text().splitlines()]
    for got, want in zip(loaded, sft, strict=True):
        assert [m.get("tool_calls") for m in got["messages"]] == [
            m.get("tool_calls") for m in want["messages"]
        ]
    assert len(sft) == m["sft"]["rows"] and all(
        msg["role"] in ("system", "user", "assistant", "tool") for r in sft for msg in r["messages"]
    )
    with_calls = next(r for r in sft if any(msg.get("tool_calls") for msg in r["messages"]))
    call = next(msg for msg in with_calls["messages"] if msg.get("tool_calls"))["tool_calls"][0]
    assert call["type"] == "function" and {"name", "arguments"} <= set(call["function"])
    lf = datasets.load_dataset(
        "json", data_files=str(ex / "llamafactory_sharegpt.json"), split="train"
    )
    assert lf.num_rows == m["sft"]["rows"] and {"conversations", "system", "tools"} <= set(
        lf.column_names
    )
    info = json.loads((ex / "dataset_info.json").read_text())
    assert info["shared"]["formatting"] == "sharegpt"


def test_a_format_without_a_recorded_outcome_is_judged_against_the_ground_truth():
    """Hermes and ShareGPT record no outcome: the final answer is verified against the
    question's ground truth, so right answers reach the SFT split and wrong ones do not."""
    from pipeline.diversity.behaviour import features

    msgs = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "\\boxed{4}"}]
    right = features(msgs, "\\boxed{4}", None, None, "4", "integer")
    wrong = features(msgs, "\\boxed{5}", None, None, "4", "integer")
    assert right["correct"] and right["verified_outcome"]
    assert not wrong["correct"] and wrong["verified_outcome"]
    recorded = features(msgs, "\\boxed{5}", True, None, "4", "integer")  # a recorded verdict wins
    assert recorded["correct"] and not recorded["verified_outcome"]
    assert not features(msgs, "\\boxed{4}", None, None)["correct"]  # nothing to judge by


def test_the_build_artifact_says_its_counts_in_words(built):
    """The Prefect artifact of a build (flows/build.py) is read in the UI: counts as people
    write them ("all_wrong 120, all_correct 40"), never a Python dict."""
    from flows.build import markdown

    _, m, _, _ = built
    text = markdown(m)
    assert "{" not in text and "'" not in text, text
    for k, v in m["rl"]["dropped"].items():
        assert f"{k} {v}" in text
