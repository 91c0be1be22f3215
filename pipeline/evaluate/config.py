"""The evaluate stage's options: the held-out set, samples per question, the engine, and the
loop each model runs (by default the one it was trained with)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.evaluate.errors import EvalError
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling
from pipeline.rollout.policy_loop import read_loop, turn_tokens


@dataclass
class EvalConfig:
    """Options of the evaluate stage."""

    eval_set: str = "math500"
    """A dataset of the lake's questions (e.g. aime2024, math500, 'bfcl_*')."""
    k: int = 4
    """Samples per question (avg@k, pass@j for j <= k, maj@k)."""
    limit: int | None = 50
    """At most this many questions (None: all), in a stable order."""
    backend: str = "auto"
    """The engine: auto (vllm where installed) | vllm | transformers."""
    max_tokens: int | None = None
    """Tokens per assistant turn; None: what each model was sampled with (its agent_loop.json),
    else 512."""
    agent: AgentConfig | None = None
    """The agent loop, for every model; None: each model's own (its agent_loop.json), else the
    default loop (without a system prompt on function-calling questions)."""
    sampling: Sampling | None = None
    """The sampling distribution, for every model; None: temperature 1 with max_tokens."""
    refine: bool = False
    """Reagent-C: a second attempt after the judge's critique of the first; both are reported
    (STAGE and STAGE+refine). Needs judge."""
    judge: str | None = None
    """The reasoning reward model (model folder or OpenAI-compatible URL) whose critiques refine
    the attempts; goes with refine."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise EvalError(f"k must be at least 1, not {self.k}")
        if self.limit is not None and self.limit < 1:
            raise EvalError(f"limit must be at least 1 (or None for all), not {self.limit}")
        if self.backend not in ("auto", "vllm", "transformers"):
            raise EvalError(f"backend must be auto, vllm or transformers, not {self.backend!r}")
        if self.refine != bool(self.judge):
            raise EvalError("refine and judge go together: a judge critiques, refine uses it")
        if self.max_tokens is not None and self.sampling is not None:
            self.sampling = replace(self.sampling, max_tokens=self.max_tokens)

    def check_inputs(self) -> None:
        """The judge is somewhere (before any engine starts)."""
        if self.judge:
            from pipeline.judge.config import check_judge

            check_judge(self.judge)

    def loop_for(self, model: str, function_calls: bool) -> tuple[AgentConfig, Sampling]:
        """The agent loop and sampling ``model`` is evaluated with: the config's, else the
        model's own (agent_loop.json), else the defaults."""
        loop = read_loop(model)
        agent = self.agent
        if agent is None and loop is not None:
            agent = replace(loop.agent, system_prompt=None) if function_calls else loop.agent
        if agent is None:
            agent = AgentConfig(
                system_prompt=None if function_calls else AgentConfig().system_prompt
            )
        sampling = self.sampling or Sampling(max_tokens=turn_tokens(model, self.max_tokens, 512))
        return agent, sampling
