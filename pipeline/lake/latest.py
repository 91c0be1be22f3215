"""The newest of what a lake holds, for the stage that needs it next: a dataset's published
version, the main job's SFT policy."""

from __future__ import annotations

from pipeline.lake import Lake


def latest_dataset(lake: Lake, name: str) -> str:
    """The folder of the newest published version of a dataset."""
    from pipeline.build import next_version

    version = next_version(lake, name) - 1
    if version < 1:
        raise FileNotFoundError(f"no published version of dataset {name!r} in {lake.root}")
    return lake.path("datasets", name, f"v{version}")


def latest_sft(lk: Lake) -> str:
    """The newest SFT policy the main job trained in this lake."""
    runs = lk.path("runs")
    found = sorted(
        (p for p in (lk.fs.glob(f"{runs}/sft-*/checkpoint-latest") if lk.fs.exists(runs) else [])),
        key=lambda p: lk.fs.info(p).get("mtime", 0),
    )
    if not found:
        raise FileNotFoundError(
            f"no SFT policy in {runs}: run the sft stage first (flow run), or pass --policy"
        )
    return found[-1]
