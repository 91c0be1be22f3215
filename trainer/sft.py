"""Supervised fine-tuning on a dataset's SFT split (cleanrl-style: one config, one loop).

Each trajectory is rendered by ``pipeline.rollout.render``, the code path of the agent loop,
so SFT trains on exactly the ids RL samples and scores; the loss is on the policy's own tokens
only (system, question, tool results and template tokens are masked). Batches group examples
of similar length and are cut anew each epoch with the seed (``LengthBatches``), so padding
stays small and no batch repeats. Starts from a local model folder, or from the nano policy: a small Qwen2
built from scratch with a byte-level BPE trained on the SFT texts themselves. Checkpoints hold
model, optimizer, scheduler, RNG states and the batch cursor; a rerun resumes.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from pipeline.rollout.agent import ToolMessageRenderer
from pipeline.rollout.render import NotAgentShaped, render, turn_text
from trainer.checkpoint import (
    checkpoint_due,
    plot,
    rng_state,
    save_checkpoint,
    set_rng_state,
    start_run,
    tensorboard,
    truncate_metrics,
)
from trainer.config import SFTTrainConfig
from trainer.logprobs import token_logprobs

CURVES = ("loss", "tokens", "lr")


def run_key(rows: list[dict], config: SFTTrainConfig) -> str:
    """A run folder per (data, config): the same data and config resume (or find the run
    done); new trajectories in the lake start a new run."""
    import orjson

    from pipeline.lake.ids import digest

    # the resolved lr: a default that changes starts a new run, and an explicit equal lr finds it
    settings = asdict(replace(config, out="", lr=config.learning_rate()))
    blob = {"rows": sorted(r["record_id"] for r in rows)} | settings
    return digest(orjson.dumps(blob, default=str, option=orjson.OPT_SORT_KEYS), 8)


def load_rows(dataset: str) -> list[dict]:
    import pyarrow.dataset as pads

    return pads.dataset(str(Path(dataset) / "sft"), format="parquet").to_table().to_pylist()


def examples(tokenizer, rows: list[dict], config: SFTTrainConfig) -> tuple[list[dict], dict]:
    """(examples {ids, labels}, counts of rows left out by reason)."""
    renderer = ToolMessageRenderer(tokenizer)
    offered = {"python"} if config.agent.max_turns > 1 else set()
    out, skipped = [], {}
    for r in rows:
        called = {c["name"] for m in r["messages"] for c in m.get("tool_calls") or []}
        if called - offered:  # the agent loop would answer these calls with an error
            skipped["calls_a_tool_not_offered"] = skipped.get("calls_a_tool_not_offered", 0) + 1
            continue
        try:
            prompt, resp, mask = render(tokenizer, r["messages"], config.agent, renderer)
        except NotAgentShaped:
            skipped["not_agent_shaped"] = skipped.get("not_agent_shaped", 0) + 1
            continue
        if len(prompt) + len(resp) > config.max_length:
            skipped["too_long"] = skipped.get("too_long", 0) + 1
            continue
        labels = [-100] * len(prompt) + [t if m else -100 for t, m in zip(resp, mask, strict=True)]
        out.append({"ids": prompt + resp, "labels": labels})
    return out, skipped


class LengthBatches:
    """A seeded stream of length-grouped batches, cut anew every epoch (a resumable cursor):
    each epoch shuffles the examples, sorts each window of ``window`` batches by length and
    cuts it (HF's group_by_length), then shuffles the batches; so no batch repeats as it was
    from one epoch to the next, and padding stays small."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, window: int = 50):
        self.lengths, self.batch_size, self.seed, self.window = lengths, batch_size, seed, window
        self.cursor = 0
        span = batch_size * window
        n = len(lengths)
        self.per_epoch = (n // span) * window + -(-(n % span) // batch_size)

    def epoch(self, e: int) -> list[list[int]]:
        rng = random.Random(self.seed * 1_000_003 + e)
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        span = self.batch_size * self.window
        out = []
        for w in range(0, len(order), span):
            part = sorted(order[w : w + span], key=lambda i: (self.lengths[i], i))
            out += [part[i : i + self.batch_size] for i in range(0, len(part), self.batch_size)]
        rng.shuffle(out)
        return out

    def take(self, n: int) -> list[list[int]]:
        got = []
        for _ in range(n):
            e, pos = divmod(self.cursor, self.per_epoch)
            got.append(self.epoch(e)[pos])
            self.cursor += 1
        return got


def collate(items: list[dict], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [B, T], attention [B, T], labels [B, T] (-100: no loss), right-padded."""
    width = max(len(x["ids"]) for x in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    for i, x in enumerate(items):
        n = len(x["ids"])
        ids[i, :n], attn[i, :n], labels[i, :n] = (
            torch.tensor(x["ids"]),
            1,
            torch.tensor(x["labels"]),
        )
    return ids, attn, labels


def sft_loss(
    model, ids, attn, labels, chunk: int = 512, denom: int | None = None
) -> tuple[torch.Tensor, int]:
    """Token-mean cross-entropy over the policy's own tokens: L = -sum_t m_t log p(y_t) / sum_t m_t,
    with the GRPO trainer's chunked fp32 log-softmax (no whole [B, T, V] fp32 tensor).
    ``denom``: the whole batch's token count when this is one micro-batch of it."""
    logp, _ = token_logprobs(model, ids, attn, chunk=chunk)  # [B, T-1]
    m = (labels[:, 1:] != -100).to(logp.dtype)  # [B, T-1]
    n = int(m.sum())
    return -(logp * m).sum() / max(1, denom or n), n


def nano_policy(out: Path, rows: list[dict], config: SFTTrainConfig) -> Path:
    """A from-scratch Qwen2 and a BPE trained on the SFT texts (questions, turns, tool results)."""
    from pipeline.demo.tiny_model import CORPUS, build_tiny_model

    texts = list(CORPUS)
    for r in rows[:5000]:
        for m in r["messages"]:
            texts.append(turn_text(m) if m["role"] == "assistant" else m.get("content") or "")
    n = config.nano
    return build_tiny_model(
        out,
        hidden=n["hidden"],
        layers=n["layers"],
        heads=n["heads"],
        kv_heads=n["kv_heads"],
        vocab=n["vocab"],
        seed=config.seed,
        corpus=texts,
        split_digits=True,
    )


def sft(config: SFTTrainConfig, rows: list[dict] | None = None, on_step=None) -> list[dict]:
    """Run (or resume) SFT; returns the metrics of the steps run now."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config.check_inputs()
    out, latest, resume = start_run(config.out, config.seed)
    rows = rows if rows is not None else load_rows(config.dataset)
    if not rows:
        raise ValueError("no SFT rows: the dataset's sft/ split is empty (see its manifest)")
    base = config.model
    if base is None and not resume:
        base = str(nano_policy(out / "nano-init", rows, config))
    src = str(latest) if resume else base
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(src)
    if config.lora_rank and resume:  # the base model again, with the adapter it trained
        from peft import PeftModel

        model = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
        model = PeftModel.from_pretrained(model, str(latest / "adapter"), is_trainable=True)
    else:
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
        if config.lora_rank:
            model = with_lora(model, config.lora_rank)
    model = model.to(device)
    model.train()
    data, skipped = examples(tokenizer, rows, config)
    if not data:
        raise ValueError(f"no trajectory can be rendered for SFT: {skipped}")
    lr = config.learning_rate()
    trained = [p for p in model.parameters() if p.requires_grad]  # all, or LoRA's adapters
    opt = torch.optim.AdamW(trained, lr=lr, weight_decay=config.weight_decay)
    warm = max(1, config.warmup_steps)

    def factor(s: int) -> float:  # linear warmup, then constant or cosine to 10%
        if config.schedule == "constant":
            return min(1.0, (s + 1) / warm)
        decay = 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, config.steps))))
        return min(1.0, (s + 1) / warm) * (0.1 + 0.9 * decay)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    # length-grouped batches cut anew each epoch, with a resumable cursor
    stream = LengthBatches([len(x["ids"]) for x in data], config.batch_size, config.seed)
    start = 0
    if resume:
        state = torch.load(latest / "trainer_state.pt", weights_only=True)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        stream.cursor, start = state["cursor"], state["step"]
        truncate_metrics(out / "metrics.jsonl", start)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    writer = tensorboard(out)
    history = []
    last_save = time.monotonic()
    for step in range(start, config.steps):
        t0 = time.perf_counter()
        batch = [data[i] for i in stream.take(1)[0]]
        # micro-batches: the same token-mean gradient, a fraction of the activations' memory
        size = config.micro_batch_size or len(batch)
        parts = [collate(batch[i : i + size], pad) for i in range(0, len(batch), size)]
        n = sum(int((labels[:, 1:] != -100).sum()) for _, _, labels in parts)
        opt.zero_grad()
        loss = 0.0
        for ids, attn, labels in parts:
            part, _ = sft_loss(model, ids.to(device), attn.to(device), labels.to(device), denom=n)
            part.backward()
            loss += part.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(trained, config.grad_clip)
        opt.step()
        sched.step()
        m = {
            "step": step + 1,
            "loss": loss,
            "tokens": n,
            "grad_norm": float(grad_norm),
            "lr": sched.get_last_lr()[0],
            "step_time": time.perf_counter() - t0,
            "examples": len(data),
            "skipped": skipped,
        }
        history.append(m)
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(m) + "\n")
        if writer is not None:
            for k in ("loss", "grad_norm", "lr"):
                writer.add_scalar(k, m[k], step + 1)
        if on_step:
            on_step(m)
        if checkpoint_due(step + 1, config, last_save):
            _save(latest, model, tokenizer, opt, sched, stream, step + 1, config)
            last_save = time.monotonic()
    _save(latest, model, tokenizer, opt, sched, stream, config.steps if history else start, config)
    plot(out, CURVES, "sft_curves.png")
    return history


def with_lora(model, rank: int):
    """LoRA adapters (peft) of rank ``rank`` on every linear layer but the output head; the
    base weights are frozen."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear", bias="none"
    )
    return get_peft_model(model, lora)


class _Merged:
    """A LoRA model as the plain model it stands for (adapters merged into a copy of the
    weights), so a checkpoint is an ordinary folder vLLM, the trainer and evaluation load."""

    def __init__(self, peft_model):
        self.peft = peft_model

    def save_pretrained(self, folder) -> None:
        base = self.peft.get_base_model()
        self.peft.merge_adapter()
        try:
            state = {
                k.replace(".base_layer", ""): v.detach().clone()
                for k, v in base.state_dict().items()
                if "lora_" not in k
            }
        finally:
            self.peft.unmerge_adapter()
        base.save_pretrained(folder, state_dict=state)
        self.peft.save_pretrained(str(Path(folder) / "adapter"))  # to resume training


def _save(latest, model, tokenizer, opt, sched, stream, step, config) -> None:
    model = _Merged(model) if config.lora_rank else model
    state = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": rng_state(),
        "cursor": stream.cursor,
        "step": step,
        "config": asdict(config),
    }
    save_checkpoint(latest, model, tokenizer, state, step, config.agent)
