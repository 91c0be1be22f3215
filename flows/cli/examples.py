"""Copy-paste examples at the end of each command's help (``flow COMMAND -h``).

Kept in one table so a test can parse every one against its command (tests/test_cli_options.py):
an example that names an option the command lost fails there, not in a user's terminal."""

from __future__ import annotations

import shlex

import typer
from rich.markup import escape

EXAMPLES: dict[str, tuple[str, ...]] = {
    "ingest": (
        "flow ingest ../shared/data",
        "flow ingest ../shared/data/questions/math500 --eval-set math500",
        "flow ingest traces/ --source my-agent --exclude '*/outputs/*'",
    ),
    "validate": ("flow validate", "flow validate --lake /data/lake"),
    "dedup": (
        "flow dedup",
        "flow dedup --eval-set mybench/test",
        "flow dedup --train-on-eval-set gsm8k/test",
    ),
    "compact": ("flow compact",),
    "formats": ("flow formats",),
    "demo": ("flow demo --out data/demo",),
    "record": (
        "flow record --upstream http://127.0.0.1:8000/v1 --port 8100",
        "OPENAI_BASE_URL=http://127.0.0.1:8100/v1 python my_agent.py",
    ),
    "record-commit": ("flow record-commit", "flow record-commit --flush"),
    "judge": ("flow judge --model ./my-judge --target rollouts --limit 50",),
    "label": (
        "flow label",
        "flow label --model runs/sft/checkpoint-latest --k 8",
        "flow label --model runs/sft/checkpoint-latest --datasets gsm8k/train --limit 100",
    ),
    "build": ("flow build --name math-rl", "flow build --name math-rl --size 200"),
    "sft": (
        "flow sft --dataset math-rl --out runs/sft",
        "flow sft --dataset math-rl/v2 --model ./base --lora-rank 16 --lr 1e-4",
    ),
    "train": (
        "flow train --dataset math-rl --model runs/sft/checkpoint-latest --out runs/r1",
        "flow train --dataset math-rl --model runs/sft/checkpoint-latest --eval-set math500 "
        "--eval-every 10",
    ),
    "eval": (
        "flow eval --model runs/r1/checkpoint-latest --eval-set math500 --k 4",
        "flow eval --model runs/r1/checkpoint-latest --eval-set 'bfcl_*' --k 1",
    ),
    "query": (
        'flow query "SELECT source, count(*) FROM valid_trajectories GROUP BY 1"',
        'flow query "SELECT * FROM evals" --format csv --out evals.csv',
    ),
    "show": ("flow show 3f2a9c1b7d",),
    "run": (
        "flow run",
        "flow run --quick",
        "flow run --real",
        "flow run --inputs ../shared/data --data-only",
        "flow run --until build",
    ),
    "serve": (
        "PREFECT_API_URL=http://127.0.0.1:4200/api flow serve",
        "flow serve --config flows/deployments.toml --limit 2",
    ),
    "model import": ("flow model import", "flow model import ./my-model.Q8_0.gguf"),
}


def command_args(example: str) -> list[str]:
    """The arguments after ``flow COMMAND`` in an example ([] for one that is not a flow call)."""
    words = shlex.split(example)
    if not words or words[0] != "flow":
        return []
    name = words[1] + (" " + words[2] if words[1] == "model" else "")
    return words[1 + len(name.split()) :]


def add_examples(app: typer.Typer) -> None:
    """Each registered command's help ends with its examples (typer's epilog)."""

    def walk(group: typer.Typer, prefix: str) -> None:
        for info in group.registered_commands:
            name = prefix + (info.name or info.callback.__name__.rstrip("_").replace("_", "-"))
            if name in EXAMPLES:
                info.epilog = "Examples:\n\n" + "\n".join("  " + escape(x) for x in EXAMPLES[name])
        for sub in group.registered_groups:
            walk(sub.typer_instance, prefix + sub.name + " ")

    walk(app, "")
