"""torch.distributed for the trainer: the process group torchrun asks for, and the reductions
that give every rank the same numbers (all ranks call each one: they are collectives)."""

from __future__ import annotations

import torch


def init_distributed(device: str) -> tuple[int, int]:
    """(world size, rank); initializes the process group when launched by torchrun."""
    import os

    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return world, (dist.get_rank() if world > 1 else 0)


def gather(obj, world: int) -> list:
    """``obj`` from every rank, in rank order ([obj] in one process)."""
    if world == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def global_sum(x: float, world: int) -> float:
    if world == 1:
        return x
    import torch.distributed as dist

    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def global_max(x: float | None, world: int) -> float | None:
    if world > 1:
        import torch.distributed as dist

        t = torch.tensor([-1.0 if x is None else float(x)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        x = None if t.item() < 0 else t.item()
    return x


def global_means(pairs: dict[str, tuple[float, float]], world: int) -> dict[str, float | None]:
    """{key: sum over ranks of the sums / sum over ranks of the counts}, one all-reduce for
    all keys (the same keys on every rank); None where no rank counted anything."""
    keys = sorted(pairs)
    t = torch.tensor([[float(pairs[k][0]), float(pairs[k][1])] for k in keys], dtype=torch.float64)
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(t)
    return {k: (s / n if n else None) for k, (s, n) in zip(keys, t.tolist(), strict=True)}
