"""The ``build`` flow: select, shard, export and publish a dataset version; artifacts: a markdown
summary and a PNG chart of the difficulty histogram and the achieved pyramid."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows.caching import CACHED, RETRIES, owned_fingerprint, run_cached
from flows.progress import locked, log_upstream, report
from pipeline.build import BuildConfig, build
from pipeline.lake import Lake
from pipeline.terminal import plain


def markdown(m: dict) -> str:
    rl, sft = m["rl"], m["sft"]
    lines = [
        f"# Dataset {m['name']} v{m['version']}",
        "",
        f"`{m.get('path')}`",
        "",
        "| split | rows |",
        "|---|---|",
        f"| rl | {rl['rows']} |",
        f"| sft | {sft['rows']} |",
        "",
        f"RL: labels `{rl['label_source']}`; supply {plain(rl['supply']) or 'none'}; "
        f"dropped {plain(rl['dropped']) or 'none'}; selected {plain(rl['selected']) or 'none'}; "
        f"pyramid {plain(rl['pyramid'])} (targets {plain(rl['targets'])}).",
        f"Short bins: {plain(rl['short_bins']) or 'none'}. "
        f"Entropy before {plain(rl['entropy_before'])}, after {plain(rl['entropy_after'])}.",
        f"SFT: dropped {plain(sft['dropped']) or 'none'}; entropy {plain(sft['entropy'])}.",
        "",
        *_diversity_md(rl.get("diversity")),
        "![pyramid](pyramid.png)",
    ]
    return "\n".join(lines)


def _diversity_md(div: dict | None) -> list[str]:
    if not div:
        return []
    from pipeline.diversity.measure import side_by_side

    rows = side_by_side(div)
    head = list(rows[0])
    out = ["## Diversity (bits)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join("" if v is None else str(v) for v in r.values()) + " |" for r in rows]
    if div["warning"]:
        out += ["", f"**Warning:** {div['warning']}"]
    return [*out, ""]


@task(name="build-dataset", **CACHED, **RETRIES)
def build_task(root: str, config: BuildConfig, fingerprint: str, code: str) -> dict:
    """Cached on (root, config, fingerprint of the labelled lake, stage code); on a miss, a
    result equal to the newest version publishes nothing (``unchanged``)."""
    lake = Lake(root)
    manifest = build(lake, config)
    return manifest | {"_owns": owned_fingerprint(lake, "build", config.name)}


@flow(name="build")
@locked
def build_flow(lake: str | None = None, config: BuildConfig | None = None) -> dict:
    """Publish ``datasets/<name>/v<N>`` from the labelled, deduplicated, validated lake."""
    lk = Lake(lake)
    config = config or BuildConfig()
    report("stage", "build")
    log_upstream(lk, "build")
    run = run_cached(build_task, "build", lk, config, dataset=config.name)
    manifest = {k: v for k, v in run.result.items() if k != "_owns"} | {"state": run.state}
    create_markdown_artifact(
        key="dataset",
        markdown=markdown(manifest),
        description=f"{config.name} v{manifest['version']}",
    )
    return manifest
