"""Dataset exports in the shapes other trainers load as they are (TRL, verl, LLaMA-Factory).

Each module writes one target; every one is loaded by its real framework in
``tests/test_exports.py``. ``write`` gives all of them for a build.
"""

from __future__ import annotations

from pipeline.exports import llamafactory, trl, verl
from pipeline.exports.config import ExportConfig

SPLIT_OF = {
    "exports/trl_sft.jsonl": "sft",
    "exports/trl_grpo.parquet": "rl",
    "exports/verl.parquet": "rl",
    "exports/llamafactory_sharegpt.json": "sft",
    "exports/dataset_info.json": "sft",
}
"""The split each export is made of: an empty split's exports are not written (``datasets``,
verl's RLHFDataset, TRL and LLaMA-Factory all fail on an empty file, each in its own words)."""


def write(
    rl_rows: list[dict], sft_rows: list[dict], name: str, system: str | None, config: ExportConfig
) -> dict[str, bytes]:
    """``exports/<file>`` -> bytes for one dataset version."""
    lf_data, lf_info = llamafactory.export(sft_rows, name)
    return {
        "exports/trl_sft.jsonl": trl.sft(sft_rows, config),
        "exports/trl_grpo.parquet": trl.grpo(rl_rows, system),
        "exports/verl.parquet": verl.export(rl_rows, system, config),
        "exports/llamafactory_sharegpt.json": lf_data,
        "exports/dataset_info.json": lf_info,
    }


__all__ = ["SPLIT_OF", "ExportConfig", "write"]
