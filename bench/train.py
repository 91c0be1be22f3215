"""Trainer step time against TRL's GRPOTrainer on the same tiny model, data and config, and the
loss of both on one identical batch.

    pip install trl        # not a project dependency; only this benchmark uses it
    python bench/train.py [--steps 10]

Both: tiny random Qwen2 (hidden 64), 8 prompts x 8 generations, 16-token completions, dense toy
reward (fraction of "7" tokens), token-level ("dapo") loss, eps 0.2 / eps_high 0.28, beta 0,
lr 1e-3, CPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from pipeline.demo.tiny_model import build_tiny_model
from pipeline.rollout.agent import AgentConfig
from trainer.logprobs import token_logprobs
from trainer.loss import grpo_tcr_loss
from trainer.train import TrainConfig, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    model_dir = str(
        build_tiny_model(tempfile.mkdtemp(prefix="tiny-"), hidden=64, heads=2, kv_heads=1)
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    (seven,) = tok("7", add_special_tokens=False).input_ids
    prompts = [{"question_id": f"q{i}", "question": f"Say a number {i}."} for i in range(64)]

    # ---- ours ------------------------------------------------------------------------------
    def reward(e, q):
        pol = [t for t, m in zip(e.response_ids, e.mask, strict=True) if m]
        return sum(t == seven for t in pol) / max(1, len(pol))

    cfg = TrainConfig(
        model=model_dir,
        out=tempfile.mkdtemp(prefix="ours-"),
        steps=args.steps + 1,
        prompts_per_step=8,
        group_size=8,
        lr=1e-3,
        max_tokens=16,
        agent=AgentConfig(
            max_turns=1,
            max_response_tokens=16,
            sandbox_workers=0,
            system_prompt=None,
            declare_tools=False,
        ),
        use_overlong=False,
        rollout_backend="transformers",  # the same sampler as TRL's (HF generate)
        adv_std_unbiased=True,  # TRL's group std is Bessel-corrected
    )
    hist = train(cfg, prompts, reward)  # same prompts as TRL: the user message only
    ours = sum(h["step_time"] for h in hist[1:]) / args.steps  # first step is warm-up

    # ---- TRL -------------------------------------------------------------------------------
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    def trl_reward(completion_ids, **kw):
        return [sum(t == seven for t in c) / max(1, len(c)) for c in completion_ids]

    times = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            times.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            times[-1] = time.perf_counter() - times[-1]

    ds = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p["question"]}]} for p in prompts]
    )
    targs = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-"),
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_generations=8,
        per_device_train_batch_size=64,
        max_completion_length=16,
        learning_rate=1e-3,
        max_steps=args.steps + 1,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=trl_reward,
        args=targs,
        train_dataset=ds,
        processing_class=tok,
        callbacks=[Timer()],
    )
    trainer.train()
    trl = sum(times[1:]) / args.steps

    # ---- one identical batch ----------------------------------------------------------------
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompt_ids = torch.randint(0, 300, (8, 10))
    completion_ids = torch.randint(0, 300, (8, 16))
    completion_mask = torch.ones(8, 16)
    completion_mask[::2, 10:] = 0  # different lengths
    adv = torch.linspace(-1, 1, 8)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attn = torch.ones_like(ids)
    logp, _ = token_logprobs(model, ids, attn)
    logp = logp[:, -16:]
    old = (
        logp.detach() - 0.3 * adv[:, None] * completion_mask
    )  # pi_old differs: clipping is exercised
    ours_loss, _ = grpo_tcr_loss(logp, old, adv, completion_mask)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": completion_mask.sum(),
    }
    trainer.model.load_state_dict(model.state_dict())  # same weights in TRL's (patched) model
    trainer.model.train()
    trl_loss = trainer._compute_loss(trainer.model, inputs)
    print(
        f"step time: ours {ours:.3f}s, TRL GRPOTrainer {trl:.3f}s, ratio ours/TRL {ours / trl:.2f} (goal <= 1)"
    )
    print(
        f"loss on one identical batch: ours {ours_loss.item():.6f}, TRL {trl_loss.item():.6f}, |diff| {abs(ours_loss.item() - trl_loss.item()):.2e}"
    )
    print(
        f"ours: mean reward {hist[0]['reward_mean']:.3f} -> {hist[-1]['reward_mean']:.3f} over {len(hist)} steps"
    )


if __name__ == "__main__":
    main()
