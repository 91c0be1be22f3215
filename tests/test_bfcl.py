"""The project's function-call verdicts against BFCL's own checker (``bfcl-eval``'s
``ast_checker``) on the shared BFCL v3 questions: every question of every category, with outputs
built from its possible answer (the canonical call and variants that BFCL accepts or rejects:
wrong values, types, names, counts, missing and extra parameters, reordered parallel calls,
strings in another case and punctuation)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from pipeline.evaluate.bfcl_text import canonical, irrelevance_variants, variants
from pipeline.evaluate.function_calls import CATEGORIES, bfcl_verdict, check
from tests.conftest import require_shared


def bfcl_checker():
    try:
        import bfcl_eval.eval_checker.ast_eval.ast_checker  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs bfcl-eval (make setup): {e}")
        pytest.skip(f"bfcl-eval is not installed: {e}")
    return bfcl_verdict


def load(category: str) -> list[tuple[dict, list]]:
    folder = require_shared() / "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data"

    def rows(path):
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    qs = rows(folder / f"BFCL_v3_{category}.json")
    answers = {}
    if category != "irrelevance":
        answers = {
            r["id"]: r["ground_truth"]
            for r in rows(folder / f"possible_answer/BFCL_v3_{category}.json")
        }
    return [(q, answers.get(q["id"], [])) for q in qs]


def test_verdicts_agree_with_bfcl_ast_checker_on_every_category():
    bfcl = bfcl_checker()
    agree, disagree = Counter(), []
    valid = Counter()
    for category in CATEGORIES:
        for q, possible in load(category):
            functions = q["function"]
            outs = (
                irrelevance_variants(functions)
                if category == "irrelevance"
                else variants(possible, functions)
            )
            for kind, output in outs.items():
                ours = check(functions, output, possible, category).valid
                theirs = bfcl(functions, output, possible, category)
                agree[category] += ours == theirs
                valid[category, kind, theirs] += 1
                if ours != theirs:
                    disagree.append((q["id"], kind, output, possible, ours, theirs))
    n = sum(agree.values()) + len(disagree)
    assert not disagree, f"{len(disagree)} of {n} verdicts differ, e.g. {disagree[:3]}"
    assert n > 10_000
    for category in CATEGORIES:  # each category has accepted and rejected outputs
        assert any(valid[c, k, True] for c, k, _ in valid if c == category)
        assert any(valid[c, k, False] for c, k, _ in valid if c == category)


@pytest.mark.parametrize("category", [*CATEGORIES, "simple_python"])
def test_raw_model_text_is_judged_as_bfcls_own_handler_and_checker_judge_it(category):
    """Model-like text, not decoded calls: each output built from a possible answer, written
    the ways models write it (the template's exact block; no newline, spaces, CRLF, arguments as
    a JSON string or missing, a broken block beside good ones, calls inside <think>, an empty
    name, NaN), judged by BFCL's Qwen FC handler + format check + ast_checker and by the
    project (decode_calls + check). 60 questions per category here; bench/bfcl_agreement.py
    runs every one. ``simple_python`` is BFCL v4's name of ``simple``."""
    from pipeline.evaluate.bfcl_text import bfcl, ours, renderings

    bfcl_checker()
    data = "simple" if category == "simple_python" else category
    seen, differ = Counter(), []
    for q, possible in load(data)[:60]:
        functions = q["function"]
        outs = (
            irrelevance_variants(functions)
            if data == "irrelevance"
            else variants(possible, functions)
        )
        for kind, output in outs.items():
            for how, text in renderings(output).items():
                theirs = bfcl(text, functions, possible, category)
                seen[how, theirs] += 1
                if ours(text, functions, possible, category) != theirs:
                    differ.append((q["id"], kind, how, theirs))
    assert not differ, f"{len(differ)} of {sum(seen.values())} differ, e.g. {differ[:5]}"
    assert sum(seen.values()) > 1000
    if data != "irrelevance":  # the slips BFCL rejects are in the set, and the exact form passes
        assert seen["no_newlines", False] and seen["string_arguments", False]
        assert seen["exact", True] and seen["after_think", True]


def test_function_calling_metrics_of_a_policy_through_the_agent_loop(tiny_model):
    """Six BFCL questions, a scripted policy with known behaviour on each: the right call, a
    call to a function not offered, parallel calls in another order, a broken call block, and
    on two irrelevance questions one abstention and one call."""
    from transformers import AutoTokenizer

    from pipeline.evaluate.function_calls import evaluate_function_calls
    from pipeline.ingest.records import openai_tools
    from pipeline.rollout.engines import ScriptedEngine

    picked = [
        *[("simple", q, a) for q, a in load("simple")[:2]],
        ("parallel", *load("parallel")[0]),
        ("multiple", *load("multiple")[0]),
        *[("irrelevance", q, a) for q, a in load("irrelevance")[:2]],
    ]
    qs = [
        {
            "question_id": q["id"],
            "question": q["question"][0][0]["content"],
            "tools": openai_tools(q["function"]),
            "ground_truth": json.dumps(a),
            "dataset": f"bfcl_{cat}",
        }
        for cat, q, a in picked
    ]

    def block(name, args):
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"

    replies = {}
    (c0,) = canonical(json.loads(qs[0]["ground_truth"]))
    replies[qs[0]["question"]] = block(*next(iter(c0.items())))
    (c1,) = canonical(json.loads(qs[1]["ground_truth"]))
    replies[qs[1]["question"]] = block("not_offered_fn", next(iter(c1.values())))
    par = canonical(json.loads(qs[2]["ground_truth"]))[::-1]
    replies[qs[2]["question"]] = "\n".join(block(*next(iter(c.items()))) for c in par)
    replies[qs[3]["question"]] = '<tool_call>\n{"name": broken\n</tool_call>'
    replies[qs[4]["question"]] = "None of these functions fits the question."
    f5 = picked[5][1]["function"][0]
    replies[qs[5]["question"]] = block(f5["name"], {})

    tok = AutoTokenizer.from_pretrained(tiny_model)
    script = lambda text, turn: next(r for q, r in replies.items() if q in text)  # noqa: E731
    r = evaluate_function_calls(ScriptedEngine(tok, script), qs, k=2)
    assert r["questions"] == 6 and r["k"] == 2
    assert r["accuracy"] == pytest.approx(3 / 6)  # right, parallel, abstention
    assert r["ast_accuracy"] == pytest.approx(2 / 4)
    assert r["format_accuracy"] == pytest.approx(3 / 4)  # the broken block
    assert r["tool_name_accuracy"] == pytest.approx(2 / 4)
    assert r["hallucinated_tool_rate"] == pytest.approx(1 / 5)  # 5 calls, one not offered
    assert r["irrelevance_detection"] == pytest.approx(1 / 2)
    assert r["calls_per_task"] == pytest.approx(5 / 6)
    assert r["slices"]["category=parallel"]["accuracy"] == 1.0
    assert r["slices"]["category=simple"]["accuracy"] == 0.5
    lo, hi = r["ci"]["accuracy"]
    assert 0 <= lo < 0.5 < hi <= 1


def test_function_call_reward_scores_format_arguments_and_result():
    """format +1, arguments +1 (the share of expected calls matched), result +2: a right answer
    scores 4, every wrong one below 2."""
    from pipeline.evaluate.function_calls import reward

    q, possible = load("parallel")[0]
    fns = q["function"]
    right = canonical(possible)
    assert reward(fns, right, True, possible, "parallel") == 4.0
    assert reward(fns, right[::-1], True, possible, "parallel") == 4.0  # any order
    half = right[:1]  # one of the two calls
    assert reward(fns, half, True, possible, "parallel") == 1.0 + 0.5
    assert reward(fns, [], True, possible, "parallel") == 0.0  # no call where two are due
    assert (
        reward(fns, right, False, possible, "parallel") == 1.0
    )  # a broken block: no format, no result
    wrong = [{name: {**args, "zz": 1}} for c in right for name, args in c.items()]
    assert reward(fns, wrong, True, possible, "parallel") == 1.0  # well-formed, nothing matches
    irr, _ = load("irrelevance")[0]
    assert reward(irr["function"], [], True, [], "irrelevance") == 4.0
    call = [{irr["function"][0]["name"]: {}}]
    assert reward(irr["function"], call, True, [], "irrelevance") == 0.0


@pytest.mark.usefixtures("sandbox_available")
def test_a_bfcl_style_rl_run_labels_builds_trains_and_exports_for_trl(tiny_model, tmp_path):
    """BFCL simple and irrelevance questions through the pipeline: live labels from a scripted
    policy (right on 1, 2 or 3 samples of 4) judged by BFCL's rules, a dataset whose RL rows carry
    the tools, one GRPO-TCR step scored by the function-calling reward, and the TRL export
    scored the same way inside TRL's GRPOTrainer."""
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from pipeline.build import BuildConfig, build
    from pipeline.dedup import DedupConfig, dedup
    from pipeline.dedup.config import DEFAULT_EVAL_SETS
    from pipeline.exports.rewards import trl_function_call_reward
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.label import LabelConfig, label
    from pipeline.lake import Lake
    from pipeline.lake.query import query
    from pipeline.rollout.agent import AgentConfig
    from pipeline.rollout.engines import Sampling, ScriptedEngine
    from pipeline.validate import ValidateConfig, validate
    from tests.conftest import PINNED
    from trainer.train import TrainConfig, train

    folder = require_shared() / "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data"
    lake = Lake(str(tmp_path / "lake"))
    files = [str(folder / f"BFCL_v3_{c}.json") for c in ("simple", "irrelevance")]
    ingest(files, lake, IngestConfig(now=PINNED))
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    # BFCL is a well-known evaluation set, held out by default: this run trains on it (opted in)
    res = dedup(lake, DedupConfig(eval_sets=tuple(s for s in DEFAULT_EVAL_SETS if s != "bfcl")))
    assert any(w.startswith("CONTAMINATION") and "bfcl" in w for w in res.warnings)
    qs = query(
        lake,
        "SELECT question, ground_truth FROM unique_questions WHERE answer_type = 'function_calls'",
    ).to_pylist()
    gts = {q["question"]: json.loads(q["ground_truth"]) for q in qs}

    def script(text: str, turn: int) -> str:  # 1, 2 or 3 of 4 samples right, by question
        q, gt = next((q, g) for q, g in gts.items() if q in text)
        right = turn % 1000 < 1 + sum(map(ord, q)) % 3
        if not gt:  # irrelevance: the right answer calls nothing
            return (
                "No function fits."
                if right
                else '<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
            )
        if not right:
            return "No function fits."
        ((name, args),) = canonical(gt)[0].items()
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"

    tok = AutoTokenizer.from_pretrained(tiny_model)
    cfg = LabelConfig(
        k=4, policy=tiny_model, limit=12, sampling=Sampling(max_tokens=64), batch_questions=5,
        agent=AgentConfig(system_prompt=None, sandbox_workers=0),
    )  # fmt: skip
    told: list[tuple[int, int]] = []
    stats = label(
        lake, cfg, on_episode=lambda *c: told.append(c), engine=ScriptedEngine(tok, script)
    )
    assert stats["labelled_now"] == 12
    assert told == [(n, 48) for n in range(1, 49)]  # each episode as it ends, across 3 batches
    rates = query(lake, "SELECT pass_rate FROM labels WHERE label_source = 'rollouts'").to_pylist()
    assert {r["pass_rate"] for r in rates} == {0.25, 0.5, 0.75}  # BFCL's verdicts, as scripted
    m = build(lake, BuildConfig(name="fc", label_source="rollouts"))
    import pyarrow.parquet as pq

    rows = pq.read_table(f"{m['path']}/rl").to_pylist()
    assert len(rows) == m["rl"]["rows"] > 0 and all(r["tools"] for r in rows)
    # one step of GRPO-TCR on it: the tiny policy is offered each question's own tools
    hist = train(
        TrainConfig(
            model=tiny_model, dataset=m["path"], out=str(tmp_path / "grpo"), steps=1,
            prompts_per_step=2, group_size=2, max_tokens=16, rollout_backend="transformers",
            dynamic_sampling=False,
        )
    )  # fmt: skip
    assert len(hist) == 1 and 0.0 <= hist[0]["reward_mean"] <= 4.0
    # TRL: the export's rows carry tools and category; the same reward inside GRPOTrainer
    ds = load_dataset("parquet", data_files=f"{m['path']}/exports/trl_grpo.parquet", split="train")
    assert all(ds["tools"]) and ds["prompt"][0][0]["role"] == "system"
    right = [
        [{"role": "assistant", "content": script(p[-1]["content"], 0)}] for p in ds["prompt"]
    ]  # sample 0: always right
    scores = trl_function_call_reward(
        right, ds["ground_truth"], ds["answer_type"], ds["tools"], ds["category"]
    )
    assert scores == [4.0] * ds.num_rows
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"), max_steps=1, per_device_train_batch_size=2,
        num_generations=2, max_completion_length=8, use_cpu=True, bf16=False,
        report_to=[], save_strategy="no", logging_steps=1, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=tiny_model,
        reward_funcs=[trl_function_call_reward],
        args=args,
        train_dataset=ds.select(range(min(4, ds.num_rows))),
        processing_class=tok,
    )
    assert trainer.train().global_step == 1
    assert "rewards/trl_function_call_reward/mean" in trainer.state.log_history[0]


def test_calls_with_non_object_arguments_are_malformed_and_other_categories_are_refused():
    """A call whose arguments are not an object cannot reach the checker; questions of BFCL
    categories the verdicts do not cover (multi-turn, Java) are refused with a clear error."""
    from pipeline.evaluate.function_calls import evaluate_function_calls, supported
    from pipeline.rollout.agent import parse_calls

    for args in ("null", "5", '"[1]"'):
        calls, bad = parse_calls(
            f'<tool_call>{{"name": "f", "arguments": {args}}}</tool_call>', "hermes"
        )
        assert bad == 1 and calls[0]["name"] is None, args
    assert supported("bfcl_live_simple/test") and not supported("bfcl_multi_turn_base/test")
    q = {
        "question_id": "m",
        "question": "q",
        "tools": [],
        "ground_truth": "[]",
        "dataset": "bfcl_multi_turn_base",
    }
    with pytest.raises(ValueError, match="no function-calling verdicts"):
        evaluate_function_calls(None, [q])


def test_a_limit_counts_the_questions_evaluated_not_those_left_out(tiny_model, tmp_path):
    """An evaluation set mixing a supported category with one judged otherwise (multi-turn):
    ``limit`` questions are evaluated, the others counted as left out, not eaten by the limit."""
    import shutil

    from flows.evaluate import eval_flow
    from pipeline.evaluate.config import EvalConfig
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.lake import Lake
    from pipeline.validate import ValidateConfig, validate
    from tests.conftest import PINNED

    data = require_shared() / "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data"
    src = tmp_path / "bfcl" / "data"
    (src / "possible_answer").mkdir(parents=True)
    for name in ("BFCL_v3_simple.json", "BFCL_v3_multi_turn_base.json"):
        lines = (data / name).read_text().splitlines()[:30]  # 30 of each is enough here
        (src / name).write_text("\n".join(lines) + "\n")
        ids = {json.loads(x)["id"] for x in lines}
        answers = (data / "possible_answer" / name).read_text().splitlines()
        kept = [x for x in answers if json.loads(x)["id"] in ids]
        (src / "possible_answer" / name).write_text("\n".join(kept) + "\n")
    shutil.copytree(data / "multi_turn_func_doc", src / "multi_turn_func_doc")
    lake = Lake(str(tmp_path / "lake"))
    ingest([str(tmp_path / "bfcl")], lake, IngestConfig(now=PINNED))
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    out = eval_flow(
        [(tiny_model, "base")],
        EvalConfig(eval_set="bfcl_*", k=1, limit=12, backend="transformers"),
        lake.root,
    )
    assert out["questions"] == 12 and out["skipped"].get("bfcl_multi_turn_base", 0) > 0
