"""SFT (issue 17): the same tokens as the agent loop, a nano policy that really learns to solve
the nano tasks with the sandboxed python tool, resume, and `flow sft` on a built dataset."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from pipeline.nano import tasks, trajectories
from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling, ScriptedEngine, TransformersEngine
from pipeline.rollout.render import render
from pipeline.sandbox import Sandbox
from pipeline.verify import verify
from trainer.sft import SFTTrainConfig, sft

pytestmark = pytest.mark.usefixtures("sandbox_available")
NANO_AGENT = AgentConfig(
    max_turns=2, max_response_tokens=64, system_prompt=None, declare_tools=False, sandbox_workers=2
)


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


def test_the_nano_policy_learns_to_solve_with_the_sandboxed_tool(tmp_path):
    """From scratch, SFT on solver trajectories whose tool outputs came from the sandbox; then
    greedy episodes on held-out questions: the policy writes the call, the sandbox runs it, the
    policy reads the result into its answer."""
    with Sandbox(NANO_AGENT.sandbox, 2) as box:
        rows = trajectories(tasks(1000, seed=0, levels=(1,)), box)
        hist = sft(SFTTrainConfig(out=str(tmp_path / "sft"), steps=400, agent=NANO_AGENT), rows)
        first, last = hist[0]["loss"], hist[-1]["loss"]
        assert last < first / 20, (first, last)
        held = tasks(20, seed=99, levels=(1,))
        eng = TransformersEngine(str(tmp_path / "sft/checkpoint-latest"))
        eps = run_episodes(
            eng,
            eng.tokenizer,
            [(f"h{i}", t.question) for i, t in enumerate(held)],
            1,
            NANO_AGENT,
            Sampling(temperature=0.0, max_tokens=48),
            sandbox=box,
        )
        truth = [box.run(t.code).stdout.strip() for t in held]
    solved = sum(
        verify(e.final_text, g, "integer").correct for e, g in zip(eps, truth, strict=True)
    )
    assert sum(e.tool_calls > 0 and e.tool_errors == 0 for e in eps) >= 18  # real, valid calls
    assert solved >= 12, [e.messages for e in eps[:3]]
    assert (tmp_path / "sft/sft_curves.png").read_bytes()[:4] == b"\x89PNG"


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
