"""SFT: the same tokens as the agent loop, a nano policy that really learns to solve
the nano tasks with the sandboxed python tool, resume, and `flow sft` on a built dataset."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoTokenizer

from pipeline.demo.nano import tasks, trajectories
from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling, ScriptedEngine, TransformersEngine
from pipeline.rollout.render import render
from pipeline.sandbox import Sandbox
from pipeline.verify import verify
from tests.conftest import NANO_AGENT
from trainer.sft import SFTTrainConfig, sft

pytestmark = pytest.mark.usefixtures("sandbox_available")


def _as_recorded(messages: list[dict]) -> list[dict]:
    """The agent loop's messages as a trajectory in the lake: text before the calls as content,
    the calls structured with JSON arguments."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                {"id": f"c{i}{j}", "name": c["name"], "arguments": json.dumps(c["arguments"])}
                for j, c in enumerate(m["tool_calls"])
            ]
            text = m["content"].split("<tool_call>")[0].rstrip("\n")
            out.append({"role": "assistant", "content": text, "tool_calls": calls})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


@pytest.mark.parametrize(
    "agent",
    [AgentConfig(), AgentConfig(system_prompt=None, declare_tools=False)],
    ids=["default", "bare"],
)
def test_sft_renders_the_ids_and_mask_the_agent_loop_produces(tiny_model, agent):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'
    turns = ["Let me compute.\n" + call + "\n" + call.replace("6 * 7", "1 + 1"), "\\boxed{42}"]
    eng = ScriptedEngine(tok, lambda text, turn: turns[min(turn % 1000, len(turns) - 1)])
    (e,) = run_episodes(eng, tok, [("q", "What is 6 times 7?")], k=1, config=agent)
    assert e.tool_calls == 2 and e.finish_reason == "answer"
    prompt, ids, mask = render(tok, _as_recorded(e.messages), agent)
    assert (prompt, ids, mask) == (e.prompt_ids, e.response_ids, e.mask)


@pytest.mark.parametrize("template", ["qwen2_5", "qwen3"])
def test_sft_renders_what_the_real_template_renders_for_the_whole_conversation(
    tiny_model, template
):
    """SFT's ids are the template's rendering of the recorded conversation, up to the last stop
    token. Qwen3 writes an empty think block before the last assistant message only (once, SFT
    left it out, so a Qwen3 policy was trained on a final turn its template never shows)."""
    import trl.chat_template_utils as templates

    from pipeline.rollout.agent import PYTHON_TOOL, head_messages

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = getattr(templates, f"{template}_chat_template")
    agent = AgentConfig()
    calls = [{"name": "python", "arguments": {"code": c}} for c in ("print(6 * 7)", "print(2)")]
    recorded = [
        {"role": "user", "content": "What is 6 times 7?"},
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [
                {"id": f"c{j}", "name": c["name"], "arguments": json.dumps(c["arguments"])}
                for j, c in enumerate(calls)
            ],
        },
        {"role": "tool", "content": "42\n", "tool_call_id": "c0"},
        {"role": "tool", "content": "2\n", "tool_call_id": "c1"},
        {"role": "assistant", "content": "The answer is \\boxed{42}."},
    ]
    as_template = [
        *head_messages(recorded[0]["content"], agent.system_prompt),
        {**recorded[1], "tool_calls": [{"type": "function", "function": c} for c in calls]},
        *recorded[2:],
    ]
    full = tok.apply_chat_template(as_template, tools=[PYTHON_TOOL], tokenize=False)
    full = full[: full.rindex(tok.eos_token) + len(tok.eos_token)]
    prompt, ids, mask = render(tok, recorded, agent)
    assert prompt + ids == tok(full, add_special_tokens=False).input_ids
    own = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])  # the policy's turns
    assert own.count("<think>\n\n</think>\n\n") == (template == "qwen3"), own


def _questions(n: int, seed: int) -> list[dict]:
    with Sandbox(NANO_AGENT.sandbox, 1) as box:
        rows = trajectories(tasks(n, seed=seed, levels=(1,)), box)
    return [
        {
            "question_id": f"s{seed}-{i}",
            "question": r["question"],
            "ground_truth": r["ground_truth"],
            "answer_type": "integer",
        }
        for i, r in enumerate(rows)
    ]


def test_the_nano_policy_learns_to_solve_with_the_sandboxed_tool(nano_sft):
    """Greedy episodes on held-out questions: the policy writes the call, the sandbox runs it,
    the policy reads the result into its answer."""
    policy, hist = nano_sft
    first, last = hist[0]["loss"], hist[-1]["loss"]
    assert last < first / 20, (first, last)
    held = _questions(20, seed=99)
    eng = TransformersEngine(str(policy))
    with Sandbox(NANO_AGENT.sandbox, 2) as box:
        eps = run_episodes(
            eng,
            eng.tokenizer,
            [(q["question_id"], q["question"]) for q in held],
            1,
            NANO_AGENT,
            Sampling(temperature=0.0, max_tokens=48),
            sandbox=box,
        )
    solved = sum(
        verify(e.final_text, q["ground_truth"], "integer").correct
        for e, q in zip(eps, held, strict=True)
    )
    assert sum(e.tool_calls > 0 and e.tool_errors == 0 for e in eps) >= 18  # real, valid calls
    assert solved >= 12, [e.messages for e in eps[:3]]
    assert (policy.parent / "sft_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_grpo_tcr_raises_the_sft_policys_held_out_accuracy(nano_sft, tmp_path):
    """RL on the loop the pipeline builds: GRPO-TCR (multi-turn, sandboxed tool calls) from the
    SFT policy raises held-out avg@8 at the temperature it samples at. At 1.3 the SFT policy
    still misses about half its samples (0.516; 0.794 at 1.0, where 50 steps moved it by 0.006,
    within noise); 30 steps gave 0.516 -> 0.594 on 2026-12-04."""
    from pipeline.evaluate import evaluate
    from trainer.train import TrainConfig, train

    policy, _ = nano_sft
    agent = AgentConfig(
        max_turns=2,
        max_response_tokens=160,
        system_prompt=None,
        declare_tools=False,
        sandbox_workers=2,
    )
    held, pool = _questions(40, seed=99), _questions(400, seed=7)
    sampling = Sampling(temperature=1.3, max_tokens=48)

    def avg8(model: str) -> float:
        return evaluate(TransformersEngine(model), held, k=8, config=agent, sampling=sampling)[
            "average@8"
        ]

    before = avg8(str(policy))
    cfg = TrainConfig(
        model=str(policy),
        out=str(tmp_path / "grpo"),
        steps=30,
        prompts_per_step=16,
        group_size=8,
        lr=1e-4,
        warmup_steps=5,
        max_tokens=48,
        temperature=sampling.temperature,
        agent=agent,
        rollout_backend="transformers",
        use_overlong=False,
    )
    hist = train(cfg, pool)
    after = avg8(str(tmp_path / "grpo/checkpoint-latest"))
    assert after >= before + 0.04, (before, after)
    early = sum(h["accuracy"] for h in hist[:10]) / 10
    late = sum(h["accuracy"] for h in hist[-10:]) / 10
    assert late > early, (early, late)  # the rollouts' own accuracy rose too


def test_sft_resumes_exactly(tmp_path):
    with Sandbox(NANO_AGENT.sandbox, 1) as box:
        rows = trajectories(tasks(64, seed=1), box)
    small = {"hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1, "vocab": 300}

    def cfg(out, steps):  # constant lr after warmup: 3 steps, then 3 more, equal 6 straight
        return SFTTrainConfig(
            out=str(out),
            steps=steps,
            batch_size=8,
            agent=NANO_AGENT,
            nano=small,
            schedule="constant",
        )

    straight = sft(cfg(tmp_path / "a", 6), rows)
    sft(cfg(tmp_path / "b", 3), rows)
    resumed = sft(cfg(tmp_path / "b", 6), rows)
    assert [h["step"] for h in resumed] == [4, 5, 6]
    assert [round(h["loss"], 6) for h in resumed] == [round(h["loss"], 6) for h in straight[3:]]
    lines = (tmp_path / "b/metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4, 5, 6]


def test_the_sft_seed_sets_the_weights_and_order_and_repeats(tmp_path):
    """``--seed`` (flow sft, flow run) reaches the nano policy's initial weights and the batch
    order: the same seed gives the same losses, another seed other ones."""
    with Sandbox(NANO_AGENT.sandbox, 1) as box:
        rows = trajectories(tasks(32, seed=1), box)
    small = {"hidden": 32, "layers": 1, "heads": 2, "kv_heads": 1, "vocab": 300}

    def losses(name: str, seed: int) -> list[float]:
        cfg = SFTTrainConfig(
            out=str(tmp_path / name), steps=3, batch_size=4, agent=NANO_AGENT, nano=small, seed=seed
        )
        return [round(h["loss"], 6) for h in sft(cfg, rows)]

    a, again, other = losses("a", 0), losses("b", 0), losses("c", 1)
    assert a == again
    assert a[0] != other[0] and a != other


def test_what_cannot_be_an_episode_is_named_and_a_trailing_result_is_left_out(tiny_model):
    from pipeline.rollout.render import NotAgentShaped

    tok = AutoTokenizer.from_pretrained(tiny_model)
    finish = {"id": "c1", "name": "finish", "arguments": '{"answer": "4"}'}
    done = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "Done.", "tool_calls": [finish]},
        {"role": "tool", "content": "Episode finished, reward = True", "tool_call_id": "c1"},
    ]
    # FireAct ends on the result of its `finish` call: nothing is trained after it
    assert render(tok, done, NANO_AGENT) == render(tok, done[:2], NANO_AGENT)
    with pytest.raises(NotAgentShaped, match="user message inside"):
        render(tok, [*done[:3], {"role": "user", "content": "more?"}, done[1]], NANO_AGENT)
    with pytest.raises(NotAgentShaped, match="start with the user"):
        render(tok, done[1:], NANO_AGENT)


def test_a_thought_then_a_call_in_two_messages_renders_as_one_turn(tiny_model):
    """ShareGPT writes the thought as a `gpt` turn and the call as the next `function_call`
    turn; the policy writes both in one turn, so SFT renders them as one."""
    tok = AutoTokenizer.from_pretrained(tiny_model)
    call = {"id": "c", "name": "python", "arguments": '{"code": "print(2)"}'}
    split_turn = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me check."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "2\n", "tool_call_id": "c"},
        {"role": "assistant", "content": "\\boxed{2}"},
    ]
    one_turn = [split_turn[0], {**split_turn[2], "content": "Let me check."}, *split_turn[3:]]
    assert render(tok, split_turn, NANO_AGENT) == render(tok, one_turn, NANO_AGENT)


def test_lora_sft_trains_adapters_saves_a_plain_model_and_resumes(tiny_model, tmp_path):
    """``lora_rank`` (peft): only the adapters train, the base weights stay; each checkpoint is
    an ordinary model folder holding the merged weights (what vLLM and the trainer load) and
    the adapter; a resumed run continues the losses of an uninterrupted one."""
    from transformers import AutoModelForCausalLM

    with Sandbox(NANO_AGENT.sandbox, 1) as box:
        rows = trajectories(tasks(32, seed=1), box)

    def cfg(out, steps):
        return SFTTrainConfig(
            out=str(out), model=tiny_model, steps=steps, batch_size=8, agent=NANO_AGENT,
            lr=1e-2, lora_rank=4, schedule="constant",
        )  # fmt: skip

    straight = sft(cfg(tmp_path / "a", 6), rows)
    assert straight[-1]["loss"] < straight[0]["loss"]
    sft(cfg(tmp_path / "b", 3), rows)
    resumed = sft(cfg(tmp_path / "b", 6), rows)
    assert [h["step"] for h in resumed] == [4, 5, 6]
    assert [round(h["loss"], 4) for h in resumed] == [round(h["loss"], 4) for h in straight[3:]]
    ckpt = tmp_path / "a/checkpoint-latest"
    assert (ckpt / "adapter/adapter_config.json").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    tuned = AutoModelForCausalLM.from_pretrained(str(ckpt))  # a plain model, no peft
    b, t = base.state_dict(), tuned.state_dict()
    assert set(b) == set(t)
    changed = [k for k in b if not torch.equal(b[k], t[k])]
    assert changed and all("proj" in k for k in changed)  # the adapted linear layers only
    assert not any("lora" in k for k in t)


def test_micro_batches_give_the_whole_batchs_update(tmp_path):
    """``micro_batch_size`` (the real mission's SFT ran out of memory at 8 x 768 tokens at
    once): the token-mean loss and the update over 8 trajectories equal those of 3 passes of at
    most 3 (padding aside), so memory is bounded without changing the recipe."""
    import torch
    from safetensors.torch import load_file

    with Sandbox(NANO_AGENT.sandbox, 1) as box:
        rows = trajectories(tasks(32, seed=2), box)
    small = {"hidden": 32, "layers": 1, "heads": 2, "kv_heads": 1, "vocab": 300}

    def run(name: str, micro: int):
        cfg = SFTTrainConfig(
            out=str(tmp_path / name), steps=2, batch_size=8, micro_batch_size=micro,
            agent=NANO_AGENT, nano=small, schedule="constant", warmup_steps=1,
        )  # fmt: skip
        losses = [h["loss"] for h in sft(cfg, rows)]
        return losses, load_file(tmp_path / name / "checkpoint-latest/model.safetensors")

    (whole, w), (parts, p) = run("whole", 0), run("parts", 3)
    assert whole == pytest.approx(parts, rel=1e-5)
    assert all(torch.allclose(w[k], p[k], atol=1e-5) for k in w)
    assert whole[0] != whole[1]  # the first update changed the model (batches differ too)
    with pytest.raises(ValueError, match="micro_batch_size"):
        SFTTrainConfig(micro_batch_size=-1, agent=NANO_AGENT)


def test_the_run_folder_is_keyed_on_the_learning_rate_the_run_uses():
    """The default lr is resolved before the run key: an explicit equal lr finds the same run
    (the mission passes none), another lr or a changed default starts a new one."""
    from trainer.config import NANO_SFT_LR
    from trainer.sft import run_key

    rows = [{"record_id": "r1"}, {"record_id": "r2"}]
    nano = SFTTrainConfig(agent=NANO_AGENT)
    assert nano.learning_rate() == NANO_SFT_LR
    assert run_key(rows, nano) == run_key(rows, replace(nano, lr=NANO_SFT_LR))
    assert run_key(rows, nano) != run_key(rows, replace(nano, lr=3e-3))
    assert SFTTrainConfig(model="some/folder").learning_rate() == 1e-5
