"""Asynchronous episodes: the async loop samples the same episodes as the
turn-by-turn loop, keeps its concurrency bounds, kills a stuck tool call without holding up
the other episodes, and labelling over two engines gives the labels of one."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace

import pytest
from transformers import AutoTokenizer

from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling, ScriptedEngine, TransformersEngine
from pipeline.sandbox import Sandbox, SandboxConfig
from pipeline.verify import verify
from tests.conftest import NANO_AGENT, PINNED, require_vllm

pytestmark = pytest.mark.usefixtures("sandbox_available")
CALL = '<tool_call>\n{{"name": "python", "arguments": {{"code": {code}}}}}\n</tool_call>'


def call(code: str) -> str:
    return CALL.format(code=json.dumps(code))


def held_out(n: int, seed: int = 99) -> list[dict]:
    from pipeline.demo.nano import tasks

    return [
        {"question_id": f"h{i}", "question": t.question, "ground_truth": str(t.answer)}
        for i, t in enumerate(tasks(n, seed=seed, levels=(1,)))
    ]


def outcome(e, q: dict) -> tuple:
    """Everything an episode gives the trainer: tokens, mask, reward, and how it ended."""
    reward = verify(e.final_text, q["ground_truth"], "integer").correct
    return (
        e.question_id,
        e.sample,
        tuple(e.response_ids),
        tuple(e.mask),
        reward,
        e.turns,
        e.tool_calls,
        e.finish_reason,
    )


def answered(text: str) -> bool:
    """The conversation has a tool result in it (as the chat template renders one)."""
    return "<tool_response>" in text or "tool\n" in text


def tool_output(e) -> str:
    return next(m["content"] for m in e.messages if m["role"] == "tool")


class Counting:
    """A real engine whose ``generate`` calls (batch sizes) are counted: shows how a schedule
    batched the same episodes."""

    def __init__(self, engine):
        self.engine, self.batches = engine, []
        self.name, self.tokenizer, self.stop_id = engine.name, engine.tokenizer, engine.stop_id

    def generate(self, prompts, sampling, n=1, seeds=None):
        self.batches.append(len(prompts) * n)
        return self.engine.generate(prompts, sampling, n, seeds)


def test_async_and_turns_sample_the_same_episodes_on_transformers(nano_sft):
    """Temperature 1, tools in the sandbox: the async loop batches the episodes differently
    (many small batches as tool results come back) and samples exactly the same tokens, masks
    and rewards, because each episode's turn draws from its own seeded stream."""
    policy, _ = nano_sft
    qs = held_out(12)
    sampling = Sampling(temperature=1.0, max_tokens=48, seed=5)
    runs = {}
    with Sandbox(NANO_AGENT.sandbox, 2) as box:
        for schedule in ("async", "turns"):
            eng = Counting(TransformersEngine(str(policy)))
            agent = AgentConfig(**{**NANO_AGENT.__dict__, "schedule": schedule})
            eps = run_episodes(
                eng, eng.tokenizer, [(q["question_id"], q["question"]) for q in qs], 4, agent,
                sampling, sandbox=box,
            )  # fmt: skip
            by_q = {q["question_id"]: q for q in qs}
            runs[schedule] = ([outcome(e, by_q[e.question_id]) for e in eps], eng.batches)
    (a, a_batches), (t, t_batches) = runs["async"], runs["turns"]
    assert a == t
    # turns: one round per turn (a generate per distinct budget); async: a batch whenever
    # episodes are ready, however few
    assert len(a_batches) > len(t_batches) and min(a_batches) < min(t_batches), (
        a_batches,
        t_batches,
    )
    tools = sum(o[6] for o in a)
    assert tools >= 40 and 0 < sum(o[4] for o in a) < len(a)  # real calls, mixed rewards


@pytest.fixture(scope="module")
def vllm_nano(nano_sft):
    require_vllm()
    from pipeline.rollout.engines import VLLMEngine

    policy, _ = nano_sft
    eng = VLLMEngine(str(policy), max_model_len=512)
    yield str(policy), eng
    eng.close()


def test_async_and_turns_give_the_same_outcomes_on_vllm_greedy(vllm_nano):
    """vLLM batches continuously: the async loop feeds a tool result back while other episodes
    generate, so sampling order differs; on greedy decoding the outcomes (tokens, masks,
    rewards) are the same multiset."""
    _, eng = vllm_nano
    qs = held_out(16)
    by_q = {q["question_id"]: q for q in qs}
    got = {}
    with Sandbox(NANO_AGENT.sandbox, 2) as box:
        for schedule in ("async", "turns"):
            agent = AgentConfig(**{**NANO_AGENT.__dict__, "schedule": schedule})
            eps = run_episodes(
                eng, eng.tokenizer, [(q["question_id"], q["question"]) for q in qs], 2, agent,
                Sampling(temperature=0.0, max_tokens=48), sandbox=box,
            )  # fmt: skip
            got[schedule] = sorted(outcome(e, by_q[e.question_id]) for e in eps)
    assert got["async"] == got["turns"]
    assert sum(o[6] for o in got["async"]) >= 24 and sum(o[4] for o in got["async"]) >= 8
    # and the default loop (system prompt, declared tool) at temperature 1: 20 x 8 episodes,
    # every sampled token with the engine's own log-prob
    eps = run_episodes(
        eng, eng.tokenizer, [(q["question_id"], q["question"]) for q in held_out(20)], 8,
        AgentConfig(max_turns=2, max_response_tokens=64), Sampling(max_tokens=16),
    )  # fmt: skip
    assert len(eps) == 160 and all(
        len(e.mask) == len(e.response_ids) == len(e.logprobs) > 0 for e in eps
    )
    sampled = [lp for e in eps for lp, m in zip(e.logprobs, e.mask, strict=True) if m]
    assert sum(lp == lp for lp in sampled) / len(sampled) > 0.9  # reported (nan: the stop token)


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_a_stuck_tool_call_is_killed_while_other_episodes_finish(tok):
    """One question's program (both its samples) sleeps past the sandbox's wall limit. Async:
    the other episodes run their calls on the third tool slot and finish long before the stuck
    calls are killed. Turn by turn, everyone waits for them."""
    wall = 3.0

    def script(text: str, turn: int) -> str:
        if answered(text):
            return "\\boxed{7}"
        return call("import time; time.sleep(60)" if "stuck" in text else "print(7)")

    config = SandboxConfig(wall_seconds=wall, cpu_seconds=5)
    qs = [("stuck", "stuck question")] + [(f"q{i}", f"question {i}") for i in range(6)]
    seconds = {}
    with Sandbox(config, 3) as box:
        for schedule in ("async", "turns"):
            agent = AgentConfig(max_turns=3, schedule=schedule, tool_workers=3, sandbox=config)
            t0 = time.monotonic()
            eps = run_episodes(ScriptedEngine(tok, script), tok, qs, 2, agent, sandbox=box)
            elapsed = time.monotonic() - t0
            stuck = [e for e in eps if e.question_id == "stuck"]
            rest = [e for e in eps if e.question_id != "stuck"]
            assert all("[error: timeout]" in tool_output(e) for e in stuck)
            assert all(e.finish_reason == "answer" and e.tool_errors == 0 for e in rest)
            # the two stuck calls ran side by side (one after the other, the later one would
            # take two wall limits): a structural bound, not a margin a busy machine breaks
            assert max(e.seconds for e in stuck) < 2 * wall, elapsed
            seconds[schedule] = max(e.seconds for e in rest), min(e.seconds for e in stuck)
    rest_async, stuck_async = seconds["async"]
    assert stuck_async >= wall and rest_async < stuck_async, seconds  # the rest finished first
    assert seconds["turns"][0] >= wall  # the barrier held every episode behind the stuck call


def test_engine_requests_and_tool_calls_stay_within_their_bounds(tok):
    """max_inflight caps what the engine is given at once; tool_workers caps the sandbox calls
    running at once (their start and end times, printed by the programs, never overlap more)."""
    prog = "import time; a = time.time(); time.sleep(0.3); print(a, time.time())"

    def script(text: str, turn: int) -> str:
        return "\\boxed{1}" if answered(text) else call(prog)

    eng = Counting(ScriptedEngine(tok, script))
    agent = AgentConfig(max_turns=2, schedule="async", max_inflight=3, tool_workers=2)
    qs = [(f"q{i}", f"question {i}") for i in range(5)]
    with Sandbox(agent.sandbox, 3) as box:  # more interpreters than tool slots
        eps = run_episodes(eng, tok, qs, 2, agent, sandbox=box)
    assert all(e.tool_calls == 1 and e.finish_reason == "answer" for e in eps)
    assert max(eng.batches) == 3 and sum(eng.batches) == 20  # 10 episodes, 2 turns each
    spans = [tuple(map(float, tool_output(e).split())) for e in eps]
    overlap = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert overlap == 2, spans


# ---- labelling over several engines -------------------------------------------------------


@pytest.fixture(scope="module")
def nano_lake(tmp_path_factory):
    """A lake of 24 nano training questions, validated and deduplicated."""
    from pipeline.dedup import dedup
    from pipeline.demo.nano import TRAIN_POOL, split
    from pipeline.ingest import IngestConfig, ingest
    from pipeline.lake import Lake
    from pipeline.validate import ValidateConfig, validate

    src = tmp_path_factory.mktemp("nano-src")
    train, _ = split(24, 0, seed=3, levels=(1,))
    path = src / "questions" / TRAIN_POOL / "train.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(json.dumps({"question": t.question, "answer": f"#### {t.answer}"}) + "\n"
                for t in train)
    )  # fmt: skip
    lake = Lake(str(tmp_path_factory.mktemp("nano-lake")))
    ingest([str(src)], lake, IngestConfig(now=PINNED))
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    dedup(lake)
    return lake


def _copy(lake, tmp_path, name: str):
    from pipeline.lake import Lake

    shutil.copytree(lake.root, tmp_path / name)
    return Lake(str(tmp_path / name))


def _labels(lake) -> tuple[list, list]:
    from pipeline.lake.query import query

    labels = query(
        lake,
        "SELECT question_id, k, n_correct FROM labels WHERE label_source = 'rollouts' ORDER BY 1",
    ).to_pylist()
    rollouts = query(
        lake, "SELECT question_id, sample, response_ids, correct FROM rollouts ORDER BY 1, 2"
    ).to_pylist()
    return labels, rollouts


@pytest.mark.parametrize(
    "backend",
    # vLLM's engines in Dask's daemonic workers (in-process engines): 200 s of CI's single core,
    # two engine starts; the sharding, checkpoints and rerun are the same on transformers
    ["transformers", pytest.param("vllm", marks=pytest.mark.slow)],
)
def test_two_engines_on_dask_label_like_one(
    backend, nano_sft, nano_lake, tmp_path, request, monkeypatch
):
    """Greedy labels of the nano policy: one engine in this process, then two engines in two
    Dask worker processes, one shard each; the same labels and the same tokens. The run's
    progress, counted from the shards' checkpoints (no callback crosses into a worker process),
    rises to every episode. A rerun of the sharded flow finds nothing left to do."""
    from flows import label as label_module
    from flows.label import label_flow
    from flows.progress import get_hook, set_hook
    from flows.runners import task_runner
    from pipeline.label import LabelConfig, label

    policy, eng = str(nano_sft[0]), None
    if backend == "vllm":
        policy, eng = request.getfixturevalue("vllm_nano")
    config = LabelConfig(
        k=2, policy=policy, backend=backend, sampling=Sampling(temperature=0.0, max_tokens=48),
        agent=NANO_AGENT, batch_questions=6,
    )  # fmt: skip
    one = _copy(nano_lake, tmp_path, "one")
    assert label(one, config, engine=eng)["labelled_now"] == 24
    two = _copy(nano_lake, tmp_path, "two")
    flow = label_flow.with_options(task_runner=task_runner("dask", 2))
    sharded = replace(config, engines=2)
    events, previous = [], get_hook()
    set_hook(lambda event, payload: events.append(payload) if event == "label" else None)
    monkeypatch.setattr(label_module, "POLL_SECONDS", 0.5)
    try:
        out = flow(lake=two.root, config=sharded)
    finally:
        set_hook(previous)
    assert out["stats"]["labelled_now"] == 24 and out["stats"]["engine"] == backend
    done = [e["done"] for e in events]
    assert {e["total"] for e in events} == {48} and done[-1] == 48, events
    assert done == sorted(done) and len(set(done)) > 2, done  # batch by batch, never back
    shards = {p.split("-")[-1] for p in two.parts("labels") if p.startswith("rollouts-")}
    assert len(shards) >= 4  # both shards checkpointed their own batches
    assert _labels(two) == _labels(one)
    labels, _ = _labels(one)
    assert 0 < sum(r["n_correct"] for r in labels) < 48  # labels that say something
    again = flow(lake=two.root, config=sharded)
    assert again["state"] == "Cached" and again["stats"]["labelled_now"] == 0


def test_ray_runner_labels_shards_like_one_engine(nano_sft, nano_lake, tmp_path):
    """Ray as a tested runner: two transformers engines in Ray workers, greedy, against one
    engine in this process; the sharded run resumes (a shard's done questions are skipped)."""
    pytest.importorskip("prefect_ray", reason="the ray extra: pip install 'flow-rl-data[ray]'")
    from flows.label import label_flow
    from flows.runners import task_runner
    from pipeline.label import LabelConfig, label

    policy = str(nano_sft[0])
    config = LabelConfig(
        k=2, policy=policy, backend="transformers", agent=NANO_AGENT, batch_questions=6,
        sampling=Sampling(temperature=0.0, max_tokens=48),
    )  # fmt: skip
    one = _copy(nano_lake, tmp_path, "one")
    label(one, config)
    two = _copy(nano_lake, tmp_path, "two")
    label(two, replace(config, limit=5))  # a run stopped after 5 questions
    flow = label_flow.with_options(task_runner=task_runner("ray"))
    out = flow(lake=two.root, config=replace(config, engines=2))
    assert out["stats"]["already_labelled"] == 5 and out["stats"]["labelled_now"] == 19
    assert _labels(two) == _labels(one)
