"""DDP with 2 gloo processes gives the same update as 1 process on the same batch."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.conftest import require_vllm
from trainer.train import TrainConfig, update

REPO = Path(__file__).resolve().parents[1]


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 300, (4, 12), generator=g)
    attn = torch.ones_like(ids)
    mask = torch.zeros(4, 11)
    for i, n in enumerate([3, 7, 5, 9]):  # different lengths: the token-level denominator matters
        mask[i, 11 - n :] = 1
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    return ids, attn, mask, adv


def _step(model, ids, attn, mask, adv):
    from trainer.logprobs import token_logprobs

    with torch.no_grad():
        old, _ = token_logprobs(model, ids, attn)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    update(
        model,
        opt,
        ids,
        attn,
        mask,
        old - 0.1 * adv[:, None],
        adv,
        None,
        TrainConfig(model="-", out="-", grad_clip=1e9),
        0.28,
        0.0,
    )


def _worker(rank: int, model_dir: str, out: str, port: int) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import AutoModelForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ddp = DDP(model)
    ids, attn, mask, adv = _batch()
    half = slice(rank * 2, rank * 2 + 2)
    _step(ddp, ids[half], attn[half], mask[half], adv[half])
    if rank == 0:
        torch.save(model.state_dict(), out)
    del ddp  # the reducer goes while its process group lives (gloo's teardown can hang otherwise)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def test_two_gloo_processes_equal_one(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    ids, attn, mask, adv = _batch()
    _step(model, ids, attn, mask, adv)
    single = model.state_dict()
    out = str(tmp_path / "ddp.pt")
    mp.spawn(_worker, args=(tiny_model, out, 29500 + os.getpid() % 1000), nprocs=2, join=True)
    ddp = torch.load(out)
    before = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).state_dict()
    changed = [k for k in single if not torch.allclose(single[k], before[k])]
    assert changed  # the step did something
    for k in single:
        assert torch.allclose(single[k], ddp[k], atol=1e-5), k


def test_torchrun_two_processes_train_and_checkpoint(tiny_model, tmp_path):
    """Two ranks with adaptive difficulty: each tracks its half of the questions, the logged
    pool is both halves, the checkpoint holds both samplers and a resumed run loads them. The
    resumed run samples through a colocated vLLM engine on each rank (the README's torchrun
    line, backend auto): its shutdown destroyed the process group the final barrier needed."""
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    ds = tmp_path / "datasets/toy/v1/rl"
    ds.mkdir(parents=True)
    rows = [
        {
            "question_id": f"q{i}",
            "question": f"What is {i} + 1?",
            "ground_truth": str(i + 1),
            "answer_type": "integer",
        }
        for i in range(8)
    ]
    pq.write_table(pa.Table.from_pylist(rows), ds / "part-00000.parquet")
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(29600 + os.getpid() % 300),
        "-m",
        "trainer",
        "--dataset",
        str(ds.parent),
        "--model",
        tiny_model,
        "--out",
        str(out),
        "--steps",
        "2",
        "--prompts-per-step",
        "2",
        "--group-size",
        "2",
        "--max-tokens",
        "8",
        "--max-turns",
        "2",
        "--rollout-backend",
        "transformers",
        "--adaptive",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(logged) == 2  # one logger (rank 0)
    # and one progress line a step, from rank 0 only (it printed nothing until the end)
    lines = [x for x in res.stderr.splitlines() if x.startswith("train step ")]
    assert [x.split(":")[0] for x in lines] == ["train step 1/2", "train step 2/2"], res.stderr[
        -2000:
    ]
    for m in logged:  # both ranks' halves: every question in play, retired or backed off
        in_play = sum(m["adaptive_pool"].values())
        assert in_play + m["adaptive_retired"] + m["adaptive_backed_off"] == 8
        assert sum(m["adaptive_drawn"].values()) <= 2 * 2  # prompts per step on each rank
    state = torch.load(out / "checkpoint-latest/trainer_state.pt", weights_only=True)
    samplers = [json.loads(s) for s in state["adaptive"]]
    assert [s["question_ids"] for s in samplers] == [
        [f"q{i}" for i in r] for r in ((0, 2, 4, 6), (1, 3, 5, 7))
    ]
    assert sum(sum(s["drawn"]) for s in samplers) == sum(
        sum(m["adaptive_drawn"].values()) for m in logged
    )
    cmd[cmd.index("--steps") + 1] = "3"  # resume: each rank loads its own sampler
    require_vllm()
    cmd[cmd.index("--rollout-backend") + 1] = "vllm"
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    state = torch.load(out / "checkpoint-latest/trainer_state.pt", weights_only=True)
    again = [json.loads(s) for s in state["adaptive"]]
    assert sum(sum(s["drawn"]) for s in again) > sum(sum(s["drawn"]) for s in samplers)


ONE_RANK_WITHOUT_SIGNAL = """
import os, sys
from pipeline.rollout.agent import AgentConfig
from trainer.train import TrainConfig, train
model, out = sys.argv[1:3]
rank = int(os.environ["RANK"])
prompts = [{"question_id": f"q{i}", "question": f"Say {i}."} for i in range(8)]
agent = AgentConfig(max_turns=1, max_response_tokens=6, sandbox_workers=0)
cfg = TrainConfig(model=model, out=out, steps=3, prompts_per_step=2, group_size=4, max_tokens=6,
                  agent=agent, rollout_backend="transformers", dynamic_sampling=True,
                  dynamic_sampling_on="reward", max_gen_batches=2, minibatches=2, grad_accum=2,
                  entropy_band=(50.0, 60.0), lr=1e-2, use_overlong=False)
# rank 0 only ever sees groups with one reward (all dropped); rank 1 sees signal
reward = (lambda e, q: 0.5) if rank == 0 else (lambda e, q: float(e.sample % 2))
with open(f"{out}-steps-{rank}.txt", "w") as f:
    for h in train(cfg, prompts, reward):
        f.write(f"{h['step']} {h.get('zero_var_frac')} {h.get('ent_coef')}\\n")
"""


def test_a_rank_with_only_zero_variance_groups_joins_every_collective(tiny_model, tmp_path):
    """Rank 0's groups are all dropped by dynamic sampling, rank 1's are kept: both finish
    (once rank 0 skipped the update and rank 1 waited in all-reduce forever), decide the same
    entropy-band coefficient, and the logged metrics are over both ranks."""
    import subprocess
    import sys

    out, script = tmp_path / "run", tmp_path / "one_rank_without_signal.py"
    script.write_text(ONE_RANK_WITHOUT_SIGNAL)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_port", str(29900 + os.getpid() % 90), str(script), tiny_model, str(out),
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = [Path(f"{out}-steps-{r}.txt").read_text().splitlines() for r in (0, 1)]
    assert len(ranks[0]) == 3 and ranks[0] == ranks[1]  # same steps, zero-var frac, ent_coef
    assert float(ranks[0][-1].split()[2]) > 0  # the band raised the bonus, on both alike
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(0.4 < r["zero_var_frac"] < 0.9 for r in rows)  # both ranks
    assert all(r["reward_std"] > 0 for r in rows)
