"""The newest of what a lake holds, for the stage that needs it next: a dataset's published
version, the main job's SFT policy."""

from __future__ import annotations

from pathlib import Path

from pipeline.lake import Lake


def latest_dataset(lake: Lake, name: str) -> str:
    """The folder of the newest published version of a dataset."""
    from pipeline.build import next_version

    version = next_version(lake, name) - 1
    if version < 1:
        raise FileNotFoundError(f"no published version of dataset {name!r} in {lake.root}")
    return lake.path("datasets", name, f"v{version}")


def dataset_folder(dataset: str, lake: str | None) -> str:
    """A published dataset's folder from what a user typed: a folder is kept; a name in the lake
    is its newest version (``demo``) or the version named (``demo/v2``), as `flow run --dataset`
    takes names. Anything else is given back unchanged, for the trainer's check to refuse with
    what it lacks."""
    if Path(dataset).is_dir() or "://" in dataset:
        return dataset
    lk = Lake(lake)
    name, _, version = dataset.partition("/")
    if version:
        folder = lk.path("datasets", name, version)
        return folder if lk.fs.isdir(folder) else dataset
    try:
        return latest_dataset(lk, name)
    except FileNotFoundError:
        return dataset


def latest_sft(lk: Lake) -> str:
    """The newest SFT policy the main job trained in this lake."""
    runs = lk.path("runs")
    found = sorted(
        (p for p in (lk.fs.glob(f"{runs}/sft-*/checkpoint-latest") if lk.fs.exists(runs) else [])),
        key=lambda p: lk.fs.info(p).get("mtime", 0),
    )
    if not found:
        raise FileNotFoundError(
            f"no SFT policy in {runs}: run the sft stage first (flow run), or pass --model"
        )
    return found[-1]
