"""The ``build`` flow: select, shard, export and publish a dataset version; artifacts: a markdown
summary and a PNG chart of the difficulty histogram and the achieved pyramid."""

from __future__ import annotations

import io

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.progress import report
from pipeline.build import BuildConfig, build
from pipeline.lake import Lake
from pipeline.query import query
from pipeline.select import SelectConfig


def pyramid_png(manifest: dict, histogram: list[dict]) -> bytes:
    """Two panels: questions per pass rate (input), and achieved vs target pyramid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.bar(
        [str(h["pass_rate"]) for h in histogram],
        [h["questions"] for h in histogram],
        color="#4a7ab5",
    )
    a.set_title("labelled questions per pass rate")
    a.set_xlabel("pass rate")
    a.tick_params(axis="x", rotation=60)
    bins = ["easy", "medium", "hard"]
    rl = manifest["rl"]
    x = range(len(bins))
    b.bar(
        [i - 0.2 for i in x],
        [rl["targets"][k] for k in bins],
        width=0.4,
        label="target",
        color="#bbbbbb",
    )
    b.bar(
        [i + 0.2 for i in x],
        [rl["pyramid"][k] for k in bins],
        width=0.4,
        label="achieved",
        color="#d9822b",
    )
    b.set_xticks(list(x), bins)
    b.set_title(f"pyramid ({rl['rows']} questions)")
    b.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


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
        f"RL: labels `{rl['label_source']}`; supply {rl['supply']}; dropped {rl['dropped']}; selected {rl['selected']}; pyramid {rl['pyramid']} (targets {rl['targets']}).",
        f"Short bins: {rl['short_bins'] or 'none'}. Entropy before {rl['entropy_before']}, after {rl['entropy_after']}.",
        f"SFT: dropped {sft['dropped']}; entropy {sft['entropy']}.",
        "",
        "![pyramid](pyramid.png)",
    ]
    return "\n".join(lines)


@task(name="build-dataset", cache_policy=NO_CACHE)
def build_task(lake: Lake, config: BuildConfig) -> dict:
    return build(lake, config)


@flow(name="build")
def build_flow(
    lake: str | None = None,
    name: str = "default",
    size: int | None = None,
    seed: int = 0,
    label_source: str | None = None,
) -> dict:
    """Publish ``datasets/<name>/v<N>`` from the labelled, deduplicated, validated lake."""
    lk = Lake(lake)
    config = BuildConfig(
        name=name, select=SelectConfig(size=size, seed=seed), label_source=label_source
    )
    report("stage", "build")
    manifest = build_task(lk, config)
    hist = query(
        lk,
        f"SELECT round(pass_rate, 3) AS pass_rate, count(*) AS questions FROM labels WHERE label_source = '{manifest['rl']['label_source']}' GROUP BY 1 ORDER BY 1",
    ).to_pylist()
    png = pyramid_png(manifest, hist)
    with lk.fs.open(
        f"{manifest['path']}/pyramid.png", "wb"
    ) as f:  # beside the manifest (not in it)
        f.write(png)
    create_markdown_artifact(
        key="dataset", markdown=markdown(manifest), description=f"{name} v{manifest['version']}"
    )
    return manifest
