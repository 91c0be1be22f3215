"""How much the main job's SFT result depends on the seed: the nano policy's SFT stage of
`flow run` (its defaults, or changed by the flags) on several seeds, each evaluated on the
held-out `nano_eval` questions (avg@8 at temperature 1, 95% interval), and the spread.

    python bench/nano_seeds.py --seeds 0,1,2 [--steps 3000] [--batch 16] [--weight-decay 0.1] \
        [--nano '{"layers": 3}'] [--sft '{"schedule": "constant", "lr": 0.002}'] \
        [--lake /tmp/nano-seeds]

One lake for every seed (ingest, validate and dedup run once; each seed's SFT has its own run
folder, keyed by its config). Prints one row per seed, then best, worst and their gap: the
issue's bar is a gap of at most 0.1.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from flows.evaluate import eval_flow
from flows.mission import MissionConfig
from flows.pipeline import pipeline_flow
from pipeline.evaluate.config import EvalConfig
from pipeline.rollout.engines import Sampling
from trainer.config import SFTTrainConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=None, help="SFT steps (default: the mission's)")
    ap.add_argument("--batch", type=int, default=None, help="SFT batch (default: the mission's)")
    ap.add_argument("--nano", default=None, help='model size, JSON (e.g. {"layers": 3})')
    ap.add_argument("--weight-decay", type=float, default=None)
    ap.add_argument("--sft", default=None, help="other SFTTrainConfig fields, JSON")
    ap.add_argument("--lake", default="/tmp/nano-seeds")
    ap.add_argument("--out", default=None, help="JSON results")
    a = ap.parse_args()
    base = MissionConfig(demo_dir=f"{a.lake}/demo")
    options = dict(base.sft_options)
    if a.nano is not None:
        options["nano"] = SFTTrainConfig().nano | json.loads(a.nano)
    if a.weight_decay is not None:
        options["weight_decay"] = a.weight_decay
    if a.sft is not None:
        options |= json.loads(a.sft)
    lr = options.pop("lr", base.sft_lr)  # the mission's own field, not an option
    base = replace(
        base,
        sft_options=options,
        sft_steps=a.steps or base.sft_steps,
        sft_batch=a.batch or base.sft_batch,
        sft_lr=lr,
    )
    print(
        f"SFT: {base.sft_steps} steps of {base.sft_batch}, lr {SFTTrainConfig(lr=lr).learning_rate()}, options {options}"
    )
    rows = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        mission = replace(base, seed=seed)
        t0 = time.perf_counter()
        out = pipeline_flow(lake=a.lake, mission=mission, until="sft", write_run_report=False)
        policy = out["results"]["sft"]["policy"]
        sft_s = time.perf_counter() - t0
        config = EvalConfig(
            eval_set=mission.eval_set,
            k=mission.eval_k,
            limit=None,
            agent=mission.agent,
            sampling=Sampling(
                temperature=mission.temperature, max_tokens=mission.max_tokens, seed=seed
            ),
            backend=mission.backend,
        )
        ev = eval_flow([(policy, f"sft-seed{seed}")], config=config, lake=a.lake)
        (row,) = ev["rows"]
        m = f"average@{row['k']}"
        lo, hi = row["ci"][m]
        metrics = [json.loads(x) for x in Path(policy).parent.joinpath("metrics.jsonl").open()]
        jump = next((x["step"] for x in metrics if x["loss"] < 0.05), None)
        rows.append(
            {"seed": seed, "avg@8": row[m], "ci": [lo, hi], "loss_end": metrics[-1]["loss"]}
            | {"first_step_loss_below_0.05": jump, "seconds": round(time.perf_counter() - t0)}
        )
        print(
            f"seed {seed}: avg@8 {row[m]:.3f} [{lo:.3f}, {hi:.3f}]  loss {metrics[-1]['loss']:.4f}"
            f"  loss < 0.05 from step {jump}  (SFT {sft_s:.0f} s, all {rows[-1]['seconds']} s)",
            flush=True,
        )
    best, worst = max(r["avg@8"] for r in rows), min(r["avg@8"] for r in rows)
    print(f"best {best:.3f}  worst {worst:.3f}  gap {best - worst:.3f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"options": options, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
