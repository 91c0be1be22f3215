"""The run report: one HTML page (plus PNG charts) of what a pipeline run left in the lake.

Everything in it is read back from the lake with DuckDB, so the page shows the lake as it is
after the run, not what a stage believed it wrote. ``conservation`` is the accounting the tests
assert: per stage, rows in = rows out + quarantined + duplicates + filtered (+ pending).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

from pipeline.lake import Lake
from pipeline.lake.query import connect
from pipeline.report.charts import bars_png
from pipeline.report.counts import conservation, rows_of


def stage_rows(stages: dict[str, dict]) -> list[dict]:
    """One display row per stage: state, seconds, and its own counts as ``key=value`` text."""
    return [
        {"stage": k, "state": v.get("state"), "seconds": v.get("seconds")}
        | {"details": ", ".join(f"{a}={b}" for a, b in v.items() if a not in ("state", "seconds"))}
        for k, v in stages.items()
    ]


def _table(rows: list[dict], max_chars: int = 120) -> str:
    if not rows:
        return "<p class=dim>none</p>"
    # every key any row has, in order of first appearance: rows with a column fewer (a JSON
    # file has no row count beside the Parquet shards) stay aligned, the cell left empty
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in cols)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(r[k]) if r.get(k) is not None else '')[:max_chars]}</td>"
            for k in cols
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _read(url: str) -> bytes | None:
    """A file beside the lake (a run's PNG), or None when it is not there."""
    import fsspec

    fs, p = fsspec.core.url_to_fs(url)
    if not fs.exists(p):
        return None
    with fs.open(p, "rb") as f:
        return f.read()


def _chart_section(
    title: str,
    rows: list[dict],
    files: dict[str, bytes],
    png: str,
    chart_title: str,
    labels: list[str],
    value: str,
) -> str:
    """A heading, the rows as a table, and (when there are rows) a bar chart saved as ``png``."""
    if not rows:
        return f"<h2>{title}</h2>" + _table(rows)
    files[png] = bars_png(chart_title, labels, [r[value] for r in rows])
    return f"<h2>{title}</h2>" + _table(rows) + f'<img src="{png}">'


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;
font-size:13px;text-align:left}th{background:#f3f3f3}.dim{color:#888}.bad{color:#b00}
img{max-width:100%;border:1px solid #eee}"""


def write_report(
    lake: Lake,
    folder: str,
    stages: dict[str, dict],
    manifest: dict | None = None,
    training: dict | None = None,
    counts: list[dict] | None = None,
    warnings: list[str] | None = None,
    sft: dict | None = None,
    evaluation: dict | None = None,
) -> str:
    """Write ``folder/index.html`` and its PNGs; returns the page's path. ``stages`` holds each
    stage's summary row (state, seconds, ...); ``counts``: ``conservation`` if already computed;
    ``warnings``: what the stages said was missing, shown first."""
    con = connect(lake)
    files: dict[str, bytes] = {}
    sections: list[str] = []
    if warnings:
        sections.append(
            "<h2>Warnings</h2><ul>"
            + "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
            + "</ul>"
        )

    sections.append("<h2>Stages</h2>" + _table(stage_rows(stages)))
    cons = counts if counts is not None else conservation(lake, manifest)
    sections.append(
        "<h2>Counts conserved</h2><p>in = out + quarantined + duplicates + filtered + pending, per stage (whole lake).</p>"
        + _table(cons)
    )
    sources = rows_of(
        con,
        """SELECT source, source_format, count(*) files, sum(records_read) records, sum(records_accepted) accepted,
                  sum(records_quarantined) quarantined, sum(trajectories) trajectories, sum(questions) questions, sum(attempts) attempts
           FROM ingest_log GROUP BY ALL ORDER BY records DESC""",
    )
    sections.append("<h2>Sources</h2>" + _table(sources))
    reasons = rows_of(
        con,
        "SELECT stage, reason, count(*) n FROM quarantine GROUP BY ALL ORDER BY n DESC, stage, reason",
    )
    labels = [f"{r['stage']}: {r['reason']}" for r in reasons]
    sections.append(
        _chart_section(
            "Quarantine",
            reasons,
            files,
            "quarantine.png",
            "quarantined records by reason",
            labels,
            "n",
        )
    )
    failing = rows_of(
        con,
        """SELECT "table", flag, count(*) n FROM (SELECT "table", unnest(flags) AS flag FROM validation)
           GROUP BY ALL ORDER BY n DESC, flag LIMIT 20""",
    )
    docs = lake.path("reports", "validation", "index.html")
    offline = lake.path("reports", "validation", "summary.html")
    link = (
        (
            f'<p>Validation report: <a href="{html.escape(offline)}">{html.escape(offline)}</a> '
            "(self-contained); "
            if lake.fs.exists(offline)
            else "<p>"
        )
        + f'Great Expectations Data Docs: <a href="{html.escape(docs)}">{html.escape(docs)}</a> '
        "(their scripts come from CDNs)</p>"
        if lake.fs.exists(docs)
        else ""
    )
    vsum = rows_of(
        con,
        """SELECT "table", count(*) validated, count(*) FILTER (WHERE passed) passed,
                  count(*) FILTER (WHERE NOT passed) quarantined, any_value(suite_version) suite
           FROM validation GROUP BY 1 ORDER BY 1""",
    )
    sections.append(
        "<h2>Validation</h2>"
        + _table(vsum)
        + "<p>Warnings (flags) by rule:</p>"
        + _table(failing)
        + link
    )
    dd = rows_of(
        con,
        """SELECT scope, count(*) members, count(*) FILTER (WHERE method = 'self') kept,
                  count(*) FILTER (WHERE method = 'exact') exact, count(*) FILTER (WHERE method = 'minhash') near,
                  round(1 - count(*) FILTER (WHERE method = 'self') / count(*), 4) AS duplicate_rate
           FROM dedup_clusters GROUP BY 1 ORDER BY 1""",
    )
    largest = rows_of(
        con,
        """SELECT n_members, array_to_string(sources, ', ') sources, left(question, 100) question
           FROM unique_questions WHERE n_members > 1 ORDER BY n_members DESC, question_id LIMIT 10""",
    )  # a "cluster" of one is no duplicate: listed only when some question has copies
    sections.append(
        "<h2>Dedup</h2>"
        + _table(dd)
        + (
            "<p>Largest question clusters:</p>" + _table(largest)
            if largest
            else "<p>No question has a near-duplicate: every cluster is a single question.</p>"
        )
    )
    if sft:
        png = _read(f"{sft['out']}/sft_curves.png")
        if png:
            files["sft_curves.png"] = png
        first, last = sft.get("first"), sft.get("last")
        sections.append(
            "<h2>SFT</h2>"
            + f"<p>policy <code>{html.escape(sft['policy'])}</code>; {sft.get('rows')} trajectories; "
            + (
                f"loss {first['loss']:.3f} &rarr; {last['loss']:.3f} over the {sft['steps']} steps run now.</p>"
                if last
                else "already trained (nothing to do).</p>"
            )
            + ('<img src="sft_curves.png">' if png else "")
        )
    hist = rows_of(
        con,
        """SELECT label_source, round(pass_rate, 3) pass_rate, count(*) questions FROM labels
           GROUP BY ALL ORDER BY label_source, pass_rate""",
    )
    labels = [f"{h['label_source']} {h['pass_rate']}" for h in hist]
    pyramid_png = manifest and lake.fs.exists(f"{manifest.get('path', '')}/pyramid.png")
    if pyramid_png and len({h["label_source"] for h in hist}) == 1:
        # the dataset's pyramid.png draws this histogram beside the pyramid: not twice
        sections.append(
            "<h2>Pass rates</h2>" + _table(hist) + "<p>(chart: with the pyramid below)</p>"
        )
    else:
        sections.append(
            _chart_section(
                "Pass rates",
                hist,
                files,
                "pass_rates.png",
                "labelled questions per pass rate",
                labels,
                "questions",
            )
        )
    if manifest:
        rl, sft = manifest["rl"], manifest["sft"]
        pyramid = [
            {
                "bin": b,
                "target": rl["targets"][b],
                "achieved": rl["pyramid"][b],
                "supply": rl["supply"][b],
                "selected": rl["selected"][b],
            }
            for b in ("easy", "medium", "hard")
        ]
        div = rl.get("diversity")
        if div:
            from pipeline.diversity.measure import side_by_side

            diversity = side_by_side(div)
        else:  # a dataset built before the diversity sampler
            diversity = [
                {"field": k, "entropy_before": rl["entropy_before"][k], "entropy_after": v}
                for k, v in rl["entropy_after"].items()
            ]
        path = manifest.get("path", "")
        png = f"{path}/pyramid.png"
        if path and lake.fs.exists(png):
            with lake.fs.open(png, "rb") as f:
                files["pyramid.png"] = f.read()
        shards = [{"file": k} | v for k, v in manifest["files"].items()]
        sections.append(
            f"<h2>Dataset {html.escape(manifest['name'])} v{manifest['version']}</h2>"
            f"<p><code>{html.escape(path)}</code>; RL {rl['rows']} questions (labels {html.escape(rl['label_source'])}), "
            f"SFT {sft['rows']} trajectories; dropped {html.escape(str(rl['dropped']))}; short bins {html.escape(str(rl['short_bins'] or 'none'))}.</p>"
            + _table(pyramid)
            + ('<img src="pyramid.png">' if "pyramid.png" in files else "")
            + "<p>Diversity (entropy, bits):</p>"
            + _table(diversity)
            + (
                f"<p><b>Warning:</b> {html.escape(div['warning'])}</p>"
                if div and div.get("warning")
                else ""
            )
            + "<p>Manifest files:</p>"
            + _table(shards)
        )
    if training:
        curves = _read(f"{training['out']}/curves.png")
        if curves:
            files["curves.png"] = curves
        sections.append(
            "<h2>Training</h2><p>The last step's metrics:</p>"
            # one row per metric: a row of some 35 columns ran off the page
            + _table(
                [
                    {"metric": k, "value": round(v, 4) if isinstance(v, float) else v}
                    for k, v in (training.get("last") or {}).items()
                ]
            )
            + ('<img src="curves.png">' if "curves.png" in files else "")
        )

    for ev in (evaluation.get("sets") or [evaluation]) if evaluation else []:
        metrics = [m for m in ev["rows"][0] if "@" in m]
        table = [
            {"stage": r["stage"], "model": r["model"]}
            | {m: round(r[m], 4) for m in metrics}
            | {"tool calls / rollout": round(r.get("tool_calls_per_rollout", 0), 2)}
            for r in ev["rows"]
        ]
        if len(table) == 2:
            table.append(
                {"stage": "grpo - sft", "model": ""}
                | {m: round(table[1][m] - table[0][m], 4) for m in metrics}
            )
        sections.append(
            f"<h2>Evaluation: before and after, {html.escape(ev['eval_set'])}</h2>"
            f"<p>{ev['questions']} held-out questions of "
            f"<code>{html.escape(ev['eval_set'])}</code> (also in the lake's <code>evals</code> table).</p>"
            + _table(table)
        )

    if training:
        sections.append(_alarms_section(training, evaluation))

    return _write_page(lake, folder, "flow run report", "Run report", sections, files)


def _write_page(
    lake: Lake, folder: str, title: str, heading: str, sections: list[str], files: dict[str, bytes]
) -> str:
    """``folder/index.html`` (the sections under a heading) and its files; returns its path."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = (
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<h1>{html.escape(heading)}</h1><p class=dim>lake <code>{html.escape(lake.root)}</code> · {when}</p>"
        + "".join(sections)
    )
    lake.fs.makedirs(folder, exist_ok=True)
    for name, data in files.items():
        with lake.fs.open(f"{folder}/{name}", "wb") as f:
            f.write(data)
    index = f"{folder}/index.html"
    with lake.fs.open(index, "wb") as f:
        f.write(page.encode())
    return index


def _alarms_section(training: dict, evaluation: dict | None) -> str:
    """Reward-hacking alarms over the run's metrics, held-out accuracy before and after."""
    import orjson

    from pipeline.evaluate.alarms import alarms

    raw = _read(f"{training['out']}/metrics.jsonl") or b""
    history = [orjson.loads(x) for x in raw.splitlines() if x.strip()]
    history = [h for h in history if "reward_mean" in h]
    held = None
    first_set = (evaluation.get("sets") or [evaluation])[0] if evaluation else None
    if first_set and len(first_set["rows"]) >= 2:
        first, last = first_set["rows"][0], first_set["rows"][-1]
        main = f"average@{first['k']}"
        held = [(0, first[main]), (len(history), last[main])]
    rang = alarms(history, held)
    checked = (
        "training reward against held-out accuracy (before and after), tool calls and the "
        "format rate against training accuracy"
    )
    items = "".join(
        f"<li class=bad><b>{html.escape(a.name)}</b>: {html.escape(a.message)}</li>" for a in rang
    )
    return f"<h2>Reward-hacking alarms</h2><p>Checked over {len(history)} steps: {checked}.</p>" + (
        f"<ul>{items}</ul>" if rang else "<p>none rang</p>"
    )


def write_eval_report(lake: Lake, folder: str, eval_set: str, rows: list[dict]) -> str:
    """An evaluation's page: per model, every metric with its interval; per slice, the main
    accuracy metric; a chart of it with whiskers. ``rows``: the evaluate flow's rows (stage,
    model, and the result ``evaluate`` returned)."""
    from pipeline.report.charts import intervals_png

    files: dict[str, bytes] = {}
    main = "accuracy" if "accuracy" in rows[0] else f"average@{rows[0]['k']}"

    def fmt(r: dict, m: str) -> str:
        lo, hi = r.get("ci", {}).get(m, (None, None))
        v = r[m]
        return f"{v:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None else "")

    metrics = [m for m, v in rows[0].items() if isinstance(v, float)]
    table = [
        {"stage": r["stage"], "model": r["model"]} | {m: fmt(r, m) for m in metrics} for r in rows
    ]
    sections = [
        f"<h2>{html.escape(eval_set)}: {rows[0]['questions']} questions × {rows[0]['k']} samples</h2>"
        "<p>95% intervals over questions (Wilson, design effect) in brackets; every number is also in the "
        "lake's <code>evals</code> table.</p>" + _table(table)
    ]
    labels, values, lows, highs = [], [], [], []
    slice_rows = []
    for r in rows:
        for name, part in [("all", r), *r.get("slices", {}).items()]:
            lo, hi = part.get("ci", {}).get(main, (part[main], part[main]))
            labels.append(f"{r['stage']} · {name}")
            values.append(part[main])
            lows.append(lo)
            highs.append(hi)
            slice_rows.append(
                {
                    "stage": r["stage"],
                    "slice": name,
                    "questions": part["questions"],
                    main: fmt(part, main),
                }
            )
    files["metric.png"] = intervals_png(f"{main} (95% CI)", labels, values, lows, highs)
    sections.append(
        f"<h2>{html.escape(main)} by slice</h2>" + _table(slice_rows) + '<img src="metric.png">'
    )
    return _write_page(lake, folder, f"evaluation {eval_set}", "Evaluation", sections, files)
