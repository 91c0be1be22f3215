"""Engines as steppers: requests go in one at a time, finished turns come out as they finish.

The agent loop drives every engine through this one interface, so a turn that finishes
generating goes to the sandbox while other episodes keep generating, and a tool result goes
back into the engine as soon as it is ready.

* ``VLLMStepper``: continuous batching by vLLM's own scheduler. Each ``step`` is one engine
  iteration (``LLMEngine.step``, the loop ``LLM.generate`` runs inside); a request added
  between steps joins the running batch at the next one, and its cached prefix (the same
  conversation's earlier turns) is not computed again.
* ``BatchStepper``: engines with a batch ``generate`` only (transformers, scripted). A step
  generates every request queued so far, one ``generate`` per distinct sampling (a prompt
  asked k times as one prompt with ``n=k``); the engine samples each request from its own
  seed, so the batches a schedule makes do not change what is sampled.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import replace

from pipeline.rollout.engines import Completion, Sampling


class VLLMStepper:
    def __init__(self, engine):
        from vllm.sampling_params import RequestOutputKind

        self.engine = engine
        self.core = engine.llm.llm_engine
        self.final_only = RequestOutputKind.FINAL_ONLY
        self.live: dict[str, Hashable] = {}  # vLLM request id -> the caller's key
        self.ids = itertools.count()

    def submit(self, key: Hashable, prompt: list[int], sampling: Sampling, seed: int) -> None:
        from vllm.inputs import TokensPrompt

        params = self.engine.params(sampling)
        params.output_kind = self.final_only  # one output per request, when it finishes
        rid = f"agent-{next(self.ids)}"
        prompt_in = TokensPrompt(prompt_token_ids=prompt)
        render = getattr(self.engine.llm, "_preprocess_cmpl_one", None)  # vLLM >= 0.30
        self.core.add_request(rid, render(prompt_in) if render else prompt_in, params)
        self.live[rid] = key

    def step(self) -> list[tuple[Hashable, Completion]]:
        done = []
        for out in self.core.step():
            if out.finished and out.request_id in self.live:
                done.append((self.live.pop(out.request_id), self.engine.completion(out.outputs[0])))
        return done

    def pending(self) -> int:
        return len(self.live)

    def abort(self) -> None:
        """Drop every request still running (an interrupted loop leaves the engine clean)."""
        if self.live:
            self.core.abort_request(list(self.live))
            self.live.clear()


class BatchStepper:
    def __init__(self, engine):
        self.engine = engine
        self.queued: list[tuple[Hashable, list[int], Sampling, int]] = []

    def submit(self, key: Hashable, prompt: list[int], sampling: Sampling, seed: int) -> None:
        self.queued.append((key, prompt, sampling, seed))

    def step(self) -> list[tuple[Hashable, Completion]]:
        # one generate per distinct sampling (the seed is per row, not per batch); the same
        # prompt asked several times (an episode's K samples) is one prompt with n samples
        groups: dict[Sampling, dict[tuple, list[tuple[Hashable, int]]]] = {}
        for key, prompt, sampling, seed in self.queued:
            by_prompt = groups.setdefault(replace(sampling, seed=0), {})
            by_prompt.setdefault(tuple(prompt), []).append((key, seed))
        self.queued = []
        done = []
        for sampling, by_prompt in groups.items():
            n = max(len(rows) for rows in by_prompt.values())
            prompts = [p for p, rows in by_prompt.items() for _ in range(len(rows) // n)]
            if any(len(rows) != n for rows in by_prompt.values()):  # uneven: one row each
                n, prompts = 1, [p for p, rows in by_prompt.items() for _ in rows]
            rows = [r for rs in by_prompt.values() for r in rs]
            outs = self.engine.generate(
                [list(p) for p in prompts], sampling, n=n, seeds=[s for _, s in rows]
            )
            done += [
                (key, c) for (key, _), c in zip(rows, (c for o in outs for c in o), strict=True)
            ]
        return done

    def pending(self) -> int:
        return len(self.queued)

    def abort(self) -> None:
        self.queued = []


def stepper(engine) -> VLLMStepper | BatchStepper:
    """The stepper for ``engine``: continuous batching where the engine has it."""
    return VLLMStepper(engine) if getattr(engine, "name", "") == "vllm" else BatchStepper(engine)
