"""Dedup: signatures equal datasketch's, LSH paths agree, planted near-duplicates follow the
threshold, GSM8K questions merge across sources, contamination is detected, runs are
deterministic, and incremental runs equal full runs."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
from datasketch import MinHash

from pipeline.dedup import DedupConfig, dedup
from pipeline.dedup.lsh import (
    band_pairs,
    band_params,
    band_partitions,
    datasketch_pairs,
    union_pairs,
)
from pipeline.dedup.minhash import DatasketchBackend, RensaBackend, exact_jaccard
from pipeline.dedup.shingles import shingle_hash, shingles
from pipeline.ingest import IngestConfig, ingest
from pipeline.lake import Lake
from pipeline.lake.query import query
from pipeline.validate import ValidateConfig, validate
from tests.conftest import PINNED, write


def test_vectorized_signatures_equal_datasketch_minhash(shared):
    texts = [
        json.loads(line)["question"] for line in (shared / "questions/gsm8k/test.jsonl").open()
    ][:50] + ["", "one", "a b c"]
    sigs = DatasketchBackend().signatures(texts)
    for t, s in zip(texts, sigs, strict=True):
        m = MinHash(num_perm=128, hashfunc=shingle_hash)
        m.update_batch(shingles(t))
        assert np.array_equal(m.hashvalues, s), t


def test_rensa_backend_estimates_jaccard_like_datasketch():
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(500)]
    base = [" ".join(rng.choice(vocab) for _ in range(80)) for _ in range(40)]
    edited = [" ".join(w if rng.random() > 0.05 else "zz" for w in b.split()) for b in base]
    ds, rs = DatasketchBackend(), RensaBackend()
    for b, e in zip(base, edited, strict=True):
        truth = exact_jaccard(b, e)
        for be in (ds, rs):
            s = be.signatures([b, e])
            assert abs((s[0] == s[1]).mean() - truth) < 0.15


def test_band_partitions_equal_datasketch_index():
    rng = random.Random(2)
    vocab = [f"w{i}" for i in range(300)]
    docs = [" ".join(rng.choice(vocab) for _ in range(50)) for _ in range(200)]
    docs += [d.replace(d.split()[3], "x", 1) for d in docs[:60]]
    be = DatasketchBackend()
    sigs = be.signatures(docs)
    b, r = band_params(0.8, 128)
    parts = [band_pairs(sigs, r, rng_) for rng_ in band_partitions(b, 4)]
    assert np.array_equal(union_pairs(parts), datasketch_pairs(sigs, be.lean, 0.8, 128, (b, r)))


def make_pool(tmp_path, name: str, questions: list[str], answer: str = "#### 1"):
    return write(
        tmp_path / "in" / "questions" / name / "train.jsonl",
        "".join(json.dumps({"question": q, "answer": answer}) + "\n" for q in questions),
    )


def run(lake: Lake, paths: list[str], **cfg):
    ingest(paths, lake, IngestConfig(now=PINNED))
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    return dedup(lake, DedupConfig(**cfg))


BASE = (
    "A farmer has 17 sheep and buys 5 more each week for 3 weeks, then sells a third of the flock at the market on Sunday. "
    "How many sheep does the farmer have left after the sale, assuming none of the sheep were born or died during that time?"
)


@pytest.mark.parametrize(
    "variant",
    [
        "  " + BASE.replace(" ", "   ") + "  ",  # whitespace: same normalized text, same id
        BASE.replace(",", "").replace("?", "!!"),  # punctuation: normalized away
        BASE + " Explain.",  # one word appended
        ". ".join(reversed(BASE.split(". "))),  # sentences reordered: only boundary shingles change
        BASE.replace("17", "23")
        .replace("5 more", "8 more")
        .replace("3 weeks", "4 weeks"),  # numbers changed
        BASE.replace("sheep", "goats").replace("flock", "herd"),  # nouns changed throughout
    ],
    ids=[
        "whitespace",
        "punctuation",
        "word-appended",
        "reordered",
        "numbers-changed",
        "nouns-changed",
    ],
)
def test_planted_near_duplicates_follow_the_threshold(tmp_path, variant):
    lake = Lake(str(tmp_path / "lake"))
    make_pool(tmp_path, "a", [BASE])
    make_pool(tmp_path, "b", [variant])
    run(lake, [str(tmp_path / "in")], verify="exact")
    uq = query(lake, "SELECT n_members, sources FROM unique_questions").to_pylist()
    truth = exact_jaccard(BASE, variant)
    assert abs(truth - 0.8) > 0.03  # planted clearly on one side of the threshold
    assert (len(uq) == 1) == (truth >= 0.8), truth
    if len(uq) == 1:
        assert uq[0]["sources"] == ["questions"]


def test_gsm8k_questions_merge_across_sources_and_are_flagged_as_eval(shared_lake):
    lake, _ = shared_lake
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    result = dedup(lake)
    rows = query(
        lake, "SELECT * FROM unique_questions WHERE list_contains(datasets, 'gsm8k/test')"
    ).to_pylist()
    assert len(rows) == 1319
    multi = [r for r in rows if {"gsm8k_model_solutions", "tora", "questions"} <= set(r["sources"])]
    assert len(multi) == 1055  # the questions present in the solutions and ToRA files
    assert all(not r["train_eligible"] and "gsm8k/test" in r["contaminated_by"] for r in rows)
    c = result.counts
    assert c["questions_distinct"] == c["questions_kept"] + c["questions_near_duplicates"]
    assert (
        c["trajectory_rows"]
        == c["trajectories_kept"]
        + c["trajectory_exact_duplicates"]
        + c["trajectory_near_duplicates"]
    )
    n = query(lake, "SELECT scope, count(*) n FROM dedup_clusters GROUP BY 1").to_pylist()
    by = {r["scope"]: r["n"] for r in n}
    assert by["question"] == c["questions_distinct"] and by["trajectory"] == c["trajectory_rows"]
    # the GSM8K train split is not an evaluation set
    train = query(
        lake,
        "SELECT bool_and(train_eligible) ok FROM unique_questions WHERE datasets = ['gsm8k/train']",
    ).to_pylist()[0]
    assert train["ok"]


def test_contamination_against_math500_and_aime2024(tmp_path, shared):
    aime = json.loads((shared / "questions/aime2024/test.jsonl").open().readline())["problem"]
    math = json.loads((shared / "questions/math500/test.jsonl").open().readlines()[7])["problem"]
    lake = Lake(str(tmp_path / "lake"))
    dst = tmp_path / "in" / "questions"
    for name in ("aime2024", "math500"):
        dst.joinpath(name).mkdir(parents=True)
        shutil.copy(shared / "questions" / name / "test.jsonl", dst / name / "test.jsonl")
    leaked = [aime.replace("  ", " ").rstrip(".") + " ", math + " Show your work."]
    make_pool(
        tmp_path,
        "scraped",
        leaked
        + [
            "What is the sum of the first 100 positive integers, and why does the pairing trick work?"
        ],
    )
    run(lake, [str(tmp_path / "in")])
    c = query(
        lake,
        "SELECT member_id, representative_id, similarity FROM dedup_clusters WHERE scope = 'contamination'",
    ).to_pylist()
    assert len(c) == 2 and all(r["similarity"] >= 0.8 for r in c)
    scraped = query(
        lake,
        "SELECT question, train_eligible, contaminated_by FROM unique_questions WHERE list_contains(datasets, 'scraped/train')",
    ).to_pylist()
    flagged = sorted(tuple(r["contaminated_by"]) for r in scraped if not r["train_eligible"])
    assert flagged == [("aime2024",), ("math500",)]
    assert sum(r["train_eligible"] for r in scraped) == 1


def test_representative_policy_prefers_correct_complete_trajectories(tmp_path):
    q = "What is 6 times 7, computed with the python tool please?"

    def traj(answer, correct, extra=False):
        msgs = [
            {"role": "user", "content": q},
            {
                "role": "assistant",
                "content": "Computing it now with the python tool as asked.",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "python", "arguments": '{"code": "print(6*7)"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "42"},
            {
                "role": "assistant",
                "content": f"The final answer is {answer}. I computed it with the python tool as you asked.",
            },
        ]
        if extra:
            msgs[-1]["content"] += " Done."
        return {"messages": msgs, "reward": 1.0 if correct else 0.0, "is_correct": correct}

    lines = [traj(41, False), traj(42, True), traj(42, True, extra=True)]
    write(tmp_path / "in/a.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    lake = Lake(str(tmp_path / "lake"))
    run(lake, [str(tmp_path / "in")], threshold=0.5)
    rows = query(
        lake,
        "SELECT c.member_id, c.representative_id, t.is_correct, t.source_index FROM dedup_clusters c JOIN trajectories t ON t.record_id = c.member_id WHERE c.scope = 'trajectory' ORDER BY t.source_index",
    ).to_pylist()
    reps = {r["representative_id"] for r in rows}
    assert len(reps) == 1
    rep = next(r for r in rows if r["member_id"] == r["representative_id"])
    assert (
        rep["is_correct"] and rep["source_index"] == 1
    )  # correct beats incorrect; then earliest/smallest


def test_same_input_same_clusters_and_incremental_equals_full(tmp_path, shared):
    src = tmp_path / "in"
    rels = ("llamafactory", "questions/aime2024", "questions/amc2023", "tau_bench/few_shot_data")
    for rel in rels:
        shutil.copytree(shared / rel, src / rel)
    full = Lake(str(tmp_path / "full"))
    run(full, [str(src)])
    again = Lake(str(tmp_path / "again"))
    run(again, [str(src)])
    # incremental: the landing folder first holds one source, then the rest arrives
    landing = tmp_path / "landing"
    shutil.copytree(shared / rels[0], landing / rels[0])
    inc = Lake(str(tmp_path / "inc"))
    run(inc, [str(landing)])
    for rel in rels[1:]:
        shutil.copytree(shared / rel, landing / rel)
    r2 = run(inc, [str(landing)])
    assert 0 < r2.counts["question_signatures_computed"] < r2.counts["questions_distinct"]

    def table(lake, name):
        return sorted(map(str, query(lake, f"SELECT * FROM {name}").to_pylist()))

    for name in ("dedup_clusters", "unique_questions"):
        assert table(full, name) == table(again, name) == table(inc, name)


class UnionFind:
    """The textbook union-find, as an oracle for the scipy connected components."""

    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, x: int) -> int:
        p = self.parent
        root = x
        while p[root] != root:
            root = p[root]
        while p[x] != root:  # path compression
            p[x], x = root, p[x]
        return int(root)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def labels(self) -> np.ndarray:
        return np.array([self.find(i) for i in range(len(self.parent))])


def test_connected_components_equal_union_find():
    from pipeline.dedup.clusters import clusters

    rng = np.random.default_rng(0)
    pairs = np.sort(rng.integers(0, 500, (400, 2)), axis=1)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    uf = UnionFind(500)
    for a, b in pairs:
        uf.union(int(a), int(b))
    assert np.array_equal(uf.labels(), clusters(500, pairs))


def test_well_known_evaluation_items_are_caught_by_path_and_content(tmp_path, shared):
    """ToRA's outputs on GSM8K test come in as trajectories under `gsm8k/test_*.jsonl`, with no
    dataset name: with only a user's own evaluation set registered they used to be
    train-eligible. They are recognised by path, a copy under a neutral path by content (the
    packaged question-id lists), and kept out with a loud warning; GSM8K train stays eligible.
    A user who leaves GSM8K test out of the evaluation sets (`--train-on-eval-set`) trains on
    them, told so."""
    from pipeline.lake.eval_sets import register

    tora = "tora/src/outputs/llm-agents/tora-70b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl"
    lines = (shared / tora).read_text().splitlines()
    write(tmp_path / "in" / tora, "\n".join(lines[:6]) + "\n")  # by path (and content)
    write(tmp_path / "in/runs/run7.jsonl", "\n".join(lines[6:10]) + "\n")  # by content only
    train = [json.loads(x)["question"] for x in (shared / "questions/gsm8k/train.jsonl").open()]
    make_pool(tmp_path, "mine", ["How many legs do 3 spiders and 2 ants have altogether?"])
    write(
        tmp_path / "in/questions/gsm8k/train.jsonl",
        "".join(json.dumps({"question": q, "answer": "#### 1"}) + "\n" for q in train[:3]),
    )
    lake = Lake(str(tmp_path / "lake"))
    ingest([str(tmp_path / "in")], lake, IngestConfig(now=PINNED))
    register(lake, ["mine/train"])  # the user's own evaluation set, as in the report
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))

    def eligible(sql_where: str) -> list[tuple]:
        return [
            (r["train_eligible"], tuple(r["contaminated_by"]))
            for r in query(
                lake,
                f"SELECT u.train_eligible, u.contaminated_by FROM unique_questions u WHERE {sql_where}",
            ).to_pylist()
        ]

    tora_q = "list_contains(sources, 'tora')"
    res = dedup(lake)
    assert eligible(tora_q) == [(False, ("gsm8k/test",))] * 6
    assert eligible("list_contains(sources, 'runs')") == [(False, ("gsm8k/test",))] * 4
    assert eligible("datasets = ['gsm8k/train']") == [(True, ())] * 3
    assert res.counts["questions_recognised_as_eval"] == 10
    [warn] = [w for w in res.warnings if "well-known evaluation sets" in w]
    assert "gsm8k/test 10 (by content 10)" in warn and "kept out of training" in warn

    opted = dedup(lake, DedupConfig(eval_sets=("math500",)))  # + the registered mine/train
    assert eligible(tora_q) == [(True, ())] * 6
    [loud] = [w for w in opted.warnings if w.startswith("CONTAMINATION")]
    assert "10 train-eligible questions" in loud and "gsm8k/test 10" in loud

    # the command line: --eval-set adds a set to the well-known ones (replacing them made GSM8K
    # test train-eligible unasked); --train-on-eval-set is how a user opts in
    from typer.testing import CliRunner

    from flows.cli import app

    r = CliRunner().invoke(app, ["dedup", "--eval-set", "math500", "--lake", lake.root])
    assert r.exit_code == 0, r.output
    assert eligible(tora_q) == [(False, ("gsm8k/test",))] * 6
    r = CliRunner().invoke(app, ["dedup", "--train-on-eval-set", "gsm8k/test", "--lake", lake.root])
    assert r.exit_code == 0 and "CONTAMINATION" in r.output, r.output
    assert eligible(tora_q) == [(True, ())] * 6
    r = CliRunner().invoke(app, ["dedup", "--train-on-eval-set", "nope", "--lake", lake.root])
    assert r.exit_code == 2 and "neither a well-known" in r.output, r.output


def test_the_packaged_lists_hold_every_question_of_their_sets(shared):
    """Each packaged list equals the question ids of its set's file in the shared data (the
    same normalisation ingest uses), and paths name their sets, not their train splits."""
    from pipeline.dedup import known_evals
    from pipeline.lake.ids import question_id

    for name, rel in known_evals.LISTS.items():
        rows = [json.loads(x) for x in (shared / "questions" / rel).open()]
        assert all(
            name in known_evals.by_content(question_id(r.get("question") or r.get("problem")))
            for r in rows
        ), name
    train = [json.loads(x)["question"] for x in (shared / "questions/gsm8k/train.jsonl").open()]
    assert not any(known_evals.by_content(question_id(q)) for q in train)
    assert known_evals.by_path("questions/gsm8k/test.jsonl") == {"gsm8k/test"}
    assert known_evals.by_path("questions/gsm8k/train.jsonl") == set()
    assert known_evals.by_path("data/AIME_2025/problems.parquet") == {"aime2025"}
    assert known_evals.by_path("tau_bench/historical_trajectories/gpt-4o-airline.json") == {
        "tau_bench/test"
    }
    assert known_evals.by_path("tau_bench/few_shot_data/MockRetailDomainEnv.jsonl") == set()
    assert known_evals.by_dataset("bfcl_simple") == {"bfcl"}
    for ordinary in (  # words that merely contain a set's name, or a far parent folder
        "questions/gsm8k/latest.jsonl",
        "tau_bench/runs/contest_latest.json",
        "data/openmath_500k/train.jsonl",
        "/home/u/bfcl-finetune/data/runs/2024/a/b.jsonl",
    ):
        assert known_evals.by_path(ordinary) == set(), ordinary


def test_answers_of_attempts_and_trajectories_keep_their_type(tmp_path, shared):
    """Only question pools carry an answer type; a multiple-choice trajectory's "B" was judged
    as math, so "The correct option is (B)." scored 0 in the exported reward. Untyped ground
    truths now get their type from the answer itself (a letter, a number), an environment
    outcome (tau-bench's expected actions) none."""
    from pipeline.exports.rewards import compute_score

    q = "Which planet is known as the red planet? (A) Venus (B) Mars (C) Jupiter (D) Saturn"
    traj = {
        "messages": [
            {"role": "user", "content": q},
            {"role": "assistant", "content": "The correct option is (B)."},
        ],
        "ground_truth": "B",
        "is_correct": True,
    }
    write(tmp_path / "in/mcq/run.jsonl", json.dumps(traj) + "\n")
    shutil.copytree(shared / "tau_bench/historical_trajectories", tmp_path / "in/tau")
    lake = Lake(str(tmp_path / "lake"))
    run(lake, [str(tmp_path / "in")])
    types = {
        r["source"]: r["t"]
        for r in query(
            lake,
            "SELECT sources[1] AS source, list(DISTINCT answer_type) AS t FROM unique_questions GROUP BY 1",
        ).to_pylist()
    }
    assert types == {"mcq": ["letter"], "tau": [None]}
    [row] = query(
        lake, "SELECT ground_truth, answer_type FROM unique_questions WHERE sources = ['mcq']"
    ).to_pylist()
    info = {"answer_type": row["answer_type"]}
    assert compute_score(None, "The correct option is (B).", row["ground_truth"], info) == 1.0
    assert compute_score(None, "So the answer is \\boxed{B}.", row["ground_truth"], info) == 1.0
    assert compute_score(None, "The correct option is (C).", row["ground_truth"], info) == 0.0


def test_largest_clusters_list_only_questions_with_copies(tmp_path):
    """Without any duplicate the "largest clusters" were ten singletons: now none, said so."""
    from flows.dedup import markdown

    make_pool(
        tmp_path, "distinct", [f"How many apples are in {n} baskets of {n + 3}?" for n in range(5)]
    )
    res = run(Lake(str(tmp_path / "lake")), [str(tmp_path / "in")])
    assert res.largest_clusters == []
    assert "No question has a near-duplicate" in markdown(res)
