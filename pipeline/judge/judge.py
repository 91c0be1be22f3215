"""One interface for every judge: a local model through the project's engines (vLLM or
transformers), or any OpenAI-compatible endpoint. ``judge(cases)`` returns one judgement per
case, parsed (``parse.py``), with the raw text kept."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pipeline.judge.config import JudgeConfig, check_judge
from pipeline.judge.errors import JudgeError
from pipeline.judge.parse import Parsed, parse
from pipeline.judge.prompt import TEMPLATE_VERSION, judge_messages
from pipeline.rollout.engines import Sampling


@dataclass
class Case:
    target_id: str
    question: str
    tools: Any
    messages: list[dict]


@dataclass
class Judgement:
    target_id: str
    raw: str
    parsed: Parsed


class Judge:
    """``engine``/``tokenizer``: an engine already loaded (the trainer's, a test's scripted one)."""

    def __init__(self, config: JudgeConfig, engine: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        self.engine, self.tokenizer, self.client = engine, tokenizer, None
        if engine is None:
            self._load()
        self.name = self.config.served_model or self.config.model
        self.revision = self._revision()

    def _load(self) -> None:
        c = self.config
        backend = c.backend
        if backend == "auto":
            from pipeline.rollout.engines import vllm_available

            backend = (
                "openai" if c.is_endpoint else ("vllm" if vllm_available() else "transformers")
            )
        if backend == "openai":
            import openai

            self.client = openai.OpenAI(
                base_url=c.model, api_key=os.environ.get(c.api_key_env) or "none", max_retries=2
            )
            if not c.served_model:
                try:
                    c.served_model = self.client.models.list().data[0].id
                except Exception as e:  # noqa: BLE001 - said with the URL
                    raise JudgeError(
                        f"the judge endpoint {c.model} did not list a model: {e}"
                    ) from e
            return
        try:
            check_judge(c.model)  # the command line's check, for library callers
        except ValueError as e:
            raise JudgeError(str(e)) from None
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(c.model)
        if backend == "vllm":
            from pipeline.rollout.engines import VLLMEngine

            self.engine = VLLMEngine(c.model, max_model_len=c.max_model_len)
        else:
            from pipeline.rollout.engines import TransformersEngine

            self.engine = TransformersEngine(c.model)

    def _revision(self) -> str:
        """What a judgement's cache key holds of the judge: its weights' hash (a folder), or the
        endpoint's model name; with the template and sampling."""
        c = self.config
        if self.client is not None or c.is_endpoint:
            who = f"{c.model.rstrip('/')}#{c.served_model}"
        elif os.path.isdir(c.model):
            from pipeline.label import model_revision

            who = model_revision(c.model)
        else:
            who = getattr(self.engine, "name", "engine")
        return f"{who}|{TEMPLATE_VERSION}|t={c.temperature}|n={c.max_tokens}|s={c.seed}"

    def _texts(self, cases: list[Case]) -> list[str]:
        chats = [judge_messages(c.question, c.tools, c.messages) for c in cases]
        if self.client is not None:

            def one(chat: list[dict]) -> str:
                r = self.client.chat.completions.create(
                    model=self.config.served_model,
                    messages=chat,
                    max_tokens=self.config.max_tokens,
                    temperature=self.config.temperature,
                    seed=self.config.seed,
                )
                return r.choices[0].message.content or ""

            with ThreadPoolExecutor(self.config.workers) as pool:
                return list(pool.map(one, chats))
        prompts = [
            self.tokenizer(
                self.tokenizer.apply_chat_template(
                    chat, tokenize=False, add_generation_prompt=True
                ),
                add_special_tokens=False,
            ).input_ids
            for chat in chats
        ]
        sampling = Sampling(self.config.temperature, 1.0, self.config.max_tokens, self.config.seed)
        outs = self.engine.generate(prompts, sampling, 1)
        skip = getattr(self.tokenizer, "all_special_tokens", [])
        texts = []
        for o in outs:
            t = o[0].text
            for s in skip:  # the stop token the engine appends is not the judge's text
                t = t.replace(s, "")
            texts.append(t)
        return texts

    def judge(self, cases: list[Case]) -> list[Judgement]:
        if not cases:
            return []
        texts = self._texts(cases)
        return [Judgement(c.target_id, t, parse(t)) for c, t in zip(cases, texts, strict=True)]
