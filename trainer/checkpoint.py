"""Checkpoints shared by the GRPO and SFT trainers: ``checkpoint-<step>`` written under a
temporary name and renamed, ``checkpoint-latest`` a symlink replaced atomically, RNG states as
plain tensors and lists (``weights_only=True`` loads them), metrics and curves."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from pipeline.rollout.policy_loop import write_loop

if TYPE_CHECKING:
    from trainer.config import TrainConfig


def start_run(out: str, seed: int) -> tuple[Path, Path, bool]:
    """(run folder, its checkpoint-latest, whether to resume from it); every RNG seeded."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    latest = folder / "checkpoint-latest"
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return folder, latest, (latest / "trainer_state.pt").exists()


def checkpoint_due(step: int, config, last_save: float, world: int = 1) -> bool:
    """Whether to save after ``step``: every ``checkpoint_every`` steps, or once
    ``checkpoint_minutes`` have passed since ``last_save`` (time.monotonic()). Under torchrun
    rank 0's clock decides for all (the save is a collective)."""
    every, minutes = config.checkpoint_every, config.checkpoint_minutes
    due = bool(every and step % every == 0) or bool(
        minutes and time.monotonic() - last_save >= 60 * minutes
    )
    if world > 1:
        from trainer.distributed import gather

        due = bool(gather(due, world)[0])
    return due


def save_checkpoint(
    latest: Path, model, tokenizer, state: dict, step: int, agent=None, max_tokens=None
) -> None:
    """Write ``checkpoint-<step>`` under a temporary name, rename it into place, then point the
    ``checkpoint-latest`` symlink at it with one atomic replace; older checkpoints go last. A
    kill at any moment leaves ``checkpoint-latest`` pointing at a complete checkpoint. ``agent``
    (and ``max_tokens`` per turn): the loop the policy was trained with, kept beside it."""
    final = latest.with_name(f"checkpoint-{step}")
    tmp = latest.with_name(f".checkpoint-{step}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(state, tmp / "trainer_state.pt")
    if agent is not None:
        write_loop(tmp, agent, max_tokens)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    if latest.exists() and not latest.is_symlink():  # a run from before checkpoint-<step>
        latest.rename(latest.with_name(f"checkpoint-old-{os.getpid()}"))
    link = latest.with_name(".checkpoint-latest.tmp")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(final.name)
    os.replace(link, latest)  # atomic: the old or the new checkpoint, never none
    for old in latest.parent.glob("checkpoint-*"):
        keep = (final.name, latest.name, "checkpoint-best")  # best: chosen by held-out accuracy
        if old.name not in keep and old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)


def rng_state() -> dict:
    """Plain ints, lists and tensors only, so the checkpoint loads with ``weights_only=True``
    (no pickle of arbitrary objects when resuming from a folder someone else wrote)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(s: dict) -> None:
    random.setstate(s["python"])
    name, keys, pos, has_gauss, gauss = s["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(s["torch"])
    if s.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def truncate_metrics(path: Path, step: int) -> None:
    """Drop the metrics of steps after the checkpoint being resumed: they are run again (a kill
    between a step's log line and its checkpoint would otherwise log that step twice)."""
    if not path.exists():
        return
    keep = [x for x in path.read_text().splitlines() if x.strip() and json.loads(x)["step"] <= step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(x + "\n" for x in keep))
    os.replace(tmp, path)


def tensorboard(out: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(out / "tb"))


def plot(out: Path, keys: tuple[str, ...], name: str = "curves.png") -> None:
    """``out/name``: one panel per key of ``out/metrics.jsonl`` over the steps."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if all(r.get(k) is not None for k in keys)]
    if not rows:
        return
    cols = min(3, len(keys))
    fig, axes = plt.subplots(
        (len(keys) + cols - 1) // cols,
        cols,
        figsize=(4 * cols, 3 * ((len(keys) + cols - 1) // cols)),
        squeeze=False,
    )
    for ax, k in zip(axes.flat, keys, strict=False):
        ax.plot([r["step"] for r in rows], [r[k] for r in rows])
        ax.set_title(k)
    fig.tight_layout()
    fig.savefig(out / name, dpi=90)
    plt.close(fig)


def keep_best(best: Path, model, tokenizer, held_out: list[dict], config, step: int) -> dict:
    """avg@k of the model being trained on the held-out questions; saved as ``best`` (with
    ``held_out.json``) when it beats the best so far, which survives a resume."""
    from pipeline.evaluate import evaluate
    from pipeline.rollout.engines import Sampling, TransformersEngine

    sampling = Sampling(
        config.temperature, config.top_p, config.max_tokens, config.seed, config.top_k
    )
    r = evaluate(
        TransformersEngine.from_model(model, tokenizer),
        held_out,
        k=config.eval_k,
        config=config.agent,
        sampling=sampling,
    )
    acc = r[f"average@{config.eval_k}"]
    record = best / "held_out.json"
    so_far = json.loads(record.read_text())["accuracy"] if record.exists() else -1.0
    if acc <= so_far:
        return {"held_out_accuracy": acc, "best_step": json.loads(record.read_text())["step"]}
    tmp = best.with_name(".checkpoint-best.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_loop(tmp, config.agent, config.max_tokens)
    (tmp / "held_out.json").write_text(
        json.dumps({"step": step, "accuracy": acc, "k": config.eval_k})
    )
    if best.exists():
        shutil.rmtree(best)
    tmp.rename(best)
    return {"held_out_accuracy": acc, "best_step": step}


def save_train_state(
    latest: Path,
    model,
    tokenizer,
    opt,
    sched,
    stream,
    step: int,
    ent_coef: float,
    config: TrainConfig,
    beta: float = 0.0,
    samplers: list[str] | None = None,
) -> None:
    """The trainer's whole state beside the weights: optimizer, scheduler, RNG, the prompt
    stream's cursor (or every rank's adaptive sampler), the entropy controller and the config."""
    state = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": rng_state(),
        "cursor": getattr(stream, "cursor", 0),
        "adaptive": samplers,
        "step": step,
        "ent_coef": ent_coef,
        "beta": beta,
        "config": asdict(config),
    }
    save_checkpoint(latest, model, tokenizer, state, step, config.agent, config.max_tokens)
