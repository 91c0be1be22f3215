"""The lake's front doors, probed as an attacker and as a careless user would: `flow query` is
read-only for every kind of lake root and bounded, prints data as data; `flow ingest` never stops
on one bad file and never loses data unseen; a killed run leaves no process behind."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app
from pipeline.demo import write_demo
from pipeline.ingest import IngestConfig, ingest
from pipeline.lake import Lake
from pipeline.lake.query import QueryConfig, QueryError, QueryTimeout, check_read_only, query
from tests.conftest import PINNED, REPO
from tests.harness import prefect_servers_of

runner = CliRunner()


@pytest.fixture(scope="module")
def demo_inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("demo-in")
    write_demo(d)
    return d


def lake_with_demo(root: str, inputs: Path) -> Lake:
    lake = Lake(root)
    ingest([str(inputs)], lake, IngestConfig(now=PINNED))
    return lake


def tables_digest(lake: Lake) -> dict[str, str]:
    out = {}
    for p in sorted(lake.fs.find(lake.path("tables"))):
        with lake.fs.open(p, "rb") as f:
            out[p] = hashlib.sha256(f.read()).hexdigest()
    return out


# ---- flow query: read-only ------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN ANALYZE COPY (SELECT * FROM trajectories LIMIT 5) TO '{tables}/trajectories/p.parquet'",
        "explain /* hidden */ analyze CREATE TABLE t AS SELECT 1",
        "EXPLAIN ANALYSE INSERT INTO trajectories SELECT * FROM trajectories",
        "EXPLAIN COPY (SELECT 1) TO '{tables}/x.csv'",
        "EXPLAIN (FORMAT json) SELECT 1",
        "SELECT 1; EXPLAIN ANALYZE SELECT 1",
    ],
)
def test_explain_analyze_and_explain_of_writes_are_refused(sql):
    with pytest.raises(QueryError, match="read-only|EXPLAIN only"):
        check_read_only(sql.format(tables="/lake/tables"))


def test_plain_explain_of_a_select_still_shows_the_plan(tmp_path, demo_inputs):
    lake = lake_with_demo(str(tmp_path / "lake"), demo_inputs)
    plan = query(lake, "EXPLAIN SELECT count(*) FROM trajectories").to_pylist()
    assert plan[0]["explain_key"] == "physical_plan" and "READ_PARQUET" in plan[0]["explain_value"]


ATTACKS = [
    "EXPLAIN ANALYZE COPY (SELECT * FROM trajectories LIMIT 5) TO '{part}'",
    "COPY (SELECT * FROM trajectories LIMIT 5) TO '{part}' (FORMAT parquet)",
    "SELECT * FROM query('COPY (SELECT 1) TO ''{part}''')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT count(*) FROM glob('/*')",
    "SELECT * FROM read_csv('https://example.com/x.csv')",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET disabled_filesystems = ''",
    "ATTACH '{root}/evil.db'",
    "SELECT * FROM read_text('flowlake://../../../etc/passwd')",
    "SELECT * FROM read_csv('memory://outside/secret.csv')",
]


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_no_query_reads_outside_or_writes_into_the_lake(tmp_path, demo_inputs, kind):
    root = str(tmp_path / "lake") if kind == "local" else f"memory://boundary-{os.getpid()}"
    lake = lake_with_demo(root, demo_inputs)
    if kind == "memory":
        lake.fs.pipe("/outside/secret.csv", b"secret\nTOPSECRET\n")
    before = tables_digest(lake)
    part = lake.url(lake.path("tables", "trajectories", "poison.parquet"))
    for sql in ATTACKS:
        with pytest.raises(Exception) as e:  # noqa: PT011 - refused or failed, never run
            query(lake, sql.format(part=part, root=root))
        assert "TOPSECRET" not in str(e.value) and "root:x:0" not in str(e.value), sql
    assert tables_digest(lake) == before
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist() == [{"n": 125}]


def test_a_lake_path_with_a_quote_works(tmp_path, demo_inputs):
    lake = lake_with_demo(str(tmp_path / "it's a lake"), demo_inputs)
    assert query(lake, "SELECT count(*) n FROM trajectories").to_pylist() == [{"n": 125}]
    with pytest.raises(Exception, match="disabled by configuration"):
        query(lake, "SELECT * FROM read_csv('/etc/passwd')")


# ---- flow query: bounded --------------------------------------------------------------------


def test_memory_threads_and_time_are_bounded(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    cfg = QueryConfig(memory_limit="300MB", threads=1, timeout_seconds=1.0)
    got = query(
        lake, "SELECT current_setting('memory_limit') m, current_setting('threads') t", cfg
    ).to_pylist()[0]
    assert got == {"t": 1, "m": "286.1 MiB"}  # 300 MB, shown in MiB
    t0 = time.monotonic()
    with pytest.raises(QueryTimeout, match="time limit of 1 s"):
        query(lake, "SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b", cfg)
    assert time.monotonic() - t0 < 60  # stopped: unbounded, the cross join runs for hours
    # the memory bound on its own: under load the 1 s limit above could stop this query first
    mem = QueryConfig(memory_limit="300MB", threads=1, timeout_seconds=120)
    with pytest.raises(Exception, match="(?i)out of memory|memory limit"):
        query(lake, "SELECT list(range) FROM range(100000000)", mem)


def test_string_functions_cannot_pass_the_memory_bound(tmp_path):
    """DuckDB's memory_limit does not cover a 1 GB string; the query's process is bounded."""
    sql = "SELECT length(repeat('x', 1000000000)) n"
    args = ["query", sql, "--lake", str(tmp_path / "lake"), "--memory-limit", "300MB"]
    res = runner.invoke(app, [*args, "--timeout", "120"])
    assert res.exit_code == 2, res.output
    assert "1000000000" not in res.output and "memory" in res.output, res.output


def test_string_functions_cannot_pass_the_time_bound(tmp_path):
    sql = "SELECT length(repeat('x', 400000000)) n"  # ~10 s of work that ignores interrupts
    args = ["query", sql, "--lake", str(tmp_path / "lake"), "--memory-limit", "4GB"]
    res = runner.invoke(app, [*args, "--timeout", "0.5"])
    assert res.exit_code == 2, res.output
    assert "400000000" not in res.output and "time limit of 0.5 s" in res.output, res.output


def test_cli_caps_the_rows_it_shows_and_writes_all_to_a_file(tmp_path):
    lake = str(tmp_path / "lake")
    res = runner.invoke(
        app, ["query", "SELECT * FROM range(5000)", "--lake", lake, "--limit", "10"]
    )
    assert res.exit_code == 0, res.output
    assert "10 row(s)" in res.output and "4990 more row(s) not shown" in res.output
    out = tmp_path / "all.parquet"
    res = runner.invoke(
        app,
        ["query", "SELECT * FROM range(5000)", "--lake", lake, "-f", "parquet", "--out", str(out)],
    )
    assert res.exit_code == 0 and pq.read_table(out).num_rows == 5000
    res = runner.invoke(app, ["query", "SELECT 1", "--lake", lake, "-f", "parquet"])
    assert res.exit_code == 2 and "--out" in res.output


# A child's own peak, from its /proc VmHWM at exit: ru_maxrss of a child forked from a large
# parent (pytest with torch and vLLM loaded) counts the parent's pages from before the exec.
PEAK = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('\\nVmHWM ' + open('/proc/self/status').read()"
    ".split('VmHWM:')[1].split()[0] + ' kB\\n'))\n"
)


def run_measured(code: str, tmp_path: Path, timeout: float = 180) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in MB) of ``python -c PEAK + code``."""
    res = subprocess.run(
        [sys.executable, "-c", PEAK + code],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    peak = int(res.stderr.rsplit("VmHWM ", 1)[1].split()[0]) // 1024
    return res.returncode, res.stderr, peak


def test_twenty_million_rows_stay_in_bounded_memory(tmp_path):
    """The probe that reached 7-10 GB: the CLI streams, shows 1,000 rows and counts the rest."""
    argv = ["flow", "query", "SELECT * FROM range(20000000)", "--lake", str(tmp_path / "lake")]
    code = f"import runpy; sys.argv = {argv!r}; runpy.run_module('flows.cli', run_name='__main__')"
    status, errs, peak = run_measured(code, tmp_path)
    assert status == 0, errs
    assert "19999000 more row(s)" in " ".join(errs.split())
    assert peak < 1024, f"peak RSS {peak} MB"


# ---- data is printed, never obeyed ----------------------------------------------------------


def test_cells_are_text_not_markup_or_terminal_codes(tmp_path):
    sql = "SELECT 'draw((0,0)); [/asy] [link=http://evil]x[/link] ' || chr(27) || ']8;;http://e' || chr(7) AS q"
    res = runner.invoke(app, ["query", sql, "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 0, res.output
    assert "[/asy]" in res.output and "[link=http://evil]x[/link]" in res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "\\x1b" in res.output and "\\x07" in res.output


def test_csv_on_the_terminal_carries_no_control_codes_and_ends_lines_with_lf(tmp_path):
    sql = (
        "SELECT 'a' || chr(27) || '[2J' || chr(7) AS \"col\x1b]0;x\x07\", "
        "'right' || chr(8207) || 'left' || chr(1564) AS b"
    )
    res = runner.invoke(app, ["query", sql, "--lake", str(tmp_path / "lake"), "-f", "csv"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "\x1b" not in out and "\x07" not in out and "\u200f" not in out and "\u061c" not in out
    assert "\\x1b[2J" in out and "\\u200f" in out and "\\u061c" in out
    assert "\r\n" not in out and out.count("\n") == 2


def test_bidi_marks_are_shown_not_obeyed_in_tables(tmp_path):
    sql = "SELECT 'abc' || chr(8207) || chr(1564) || chr(8206) || 'def' AS q"
    res = runner.invoke(app, ["query", sql, "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 0, res.output
    assert not {"\u200f", "\u061c", "\u200e"} & set(res.output)
    assert "\\u200f\\u061c\\u200e" in res.output


def test_math500_questions_with_asy_markup_print(shared, tmp_path):
    lake = str(tmp_path / "lake")
    assert (
        runner.invoke(app, ["ingest", str(shared / "questions/math500"), "--lake", lake]).exit_code
        == 0
    )
    sql = "SELECT question FROM questions WHERE question LIKE '%[/asy]%'"
    res = runner.invoke(app, ["query", sql, "--lake", lake, "--limit", "0"])
    assert res.exit_code == 0, res.output
    n = query(Lake(lake), sql.replace("question FROM", "count(*) n FROM")).to_pylist()[0]["n"]
    assert n > 40 and f"{n} row(s)" in res.output and "[asy]" in res.output  # shown, not parsed


def test_names_and_errors_from_the_data_are_escaped(tmp_path):
    src = tmp_path / "in" / "[bold]x[/bold]" / "a.jsonl"
    src.parent.mkdir(parents=True)
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok \x1b[2J"}]
    src.write_text(json.dumps({"messages": msgs}) + "\n")
    res = runner.invoke(app, ["ingest", str(src.parent.parent), "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 0, res.output
    bad = "SELECT CAST('[/red] x' AS INTEGER)"
    res = runner.invoke(app, ["query", bad, "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 1 and "[/red]" in res.output  # the error names the SQL as text
    tid = json.loads(
        runner.invoke(
            app,
            [
                "query",
                "SELECT trajectory_id FROM trajectories",
                "--lake",
                str(tmp_path / "lake"),
                "-f",
                "json",
            ],
        ).stdout
    )
    assert len(tid) == 1
    res = runner.invoke(app, ["show", tid[0]["trajectory_id"], "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 0 and "\x1b" not in res.output and "\\x1b[2J" in res.output


# ---- flow ingest: nothing stops it, nothing is lost unseen ----------------------------------

CHAT = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def test_data_after_a_json_arrays_closing_bracket_is_read(tmp_path):
    one = json.dumps(CHAT)
    src = tmp_path / "in" / "concat.json"
    src.parent.mkdir()
    src.write_text(f"[{one},{one},{one}]\n[{one},{one},{one}]\n")
    (r,) = ingest([str(src)], Lake(str(tmp_path / "lake"))).files
    assert (r.records_read, r.accepted) == (6, 6)  # once 3: the second array was dropped
    src.write_text(f'[{one}]\n{one}\n"a stray string"\n[{one}')
    (r,) = ingest([str(src)], Lake(str(tmp_path / "lake2"))).files
    assert (r.records_read, r.accepted, r.quarantined) == (5, 3, 2)
    assert r.reasons == {"not_an_object": 1, "truncated_json": 1}  # the rest, seen and kept


def test_a_small_file_of_huge_invalid_lines_stays_in_bounded_memory(tmp_path):
    """90 KB of .jsonl.zst holding 2,000 invalid 1 MB lines once peaked at 6.5 GB."""
    import zstandard

    src = tmp_path / "in" / "bomb.jsonl.zst"
    src.parent.mkdir()
    line = b"{" + b"x" * (1 << 20) + b"\n"
    with open(src, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as w:
        for _ in range(1000):
            w.write(line)
    assert src.stat().st_size < 200_000
    script = (
        "from pipeline.ingest import ingest; from pipeline.lake import Lake\n"
        f"r = ingest([{str(src)!r}], Lake({str(tmp_path / 'lake')!r})).files[0]\n"
        "print(r.records_read, r.quarantined, dict(r.reasons), file=sys.stderr)\n"
    )
    code, errs, rss = run_measured(script, tmp_path)
    assert code == 0, errs
    assert errs.split()[:2] == ["1000", "1000"] and "invalid_json" in errs
    assert rss < 1024, f"peak RSS {rss} MB"
    q = query(
        Lake(str(tmp_path / "lake")), "SELECT max(length(raw)) m, min(raw_bytes) b FROM quarantine"
    )
    assert q.to_pylist() == [{"m": 64 << 10, "b": (1 << 20) + 2}]  # the start kept, the size told


def test_special_files_do_not_hang_the_cli(tmp_path, cli_env):
    d = tmp_path / "in"
    d.mkdir()
    os.symlink("/dev/zero", d / "zero.jsonl")
    os.mkfifo(d / "fifo.jsonl")
    (d / "ok.jsonl").write_text(json.dumps(CHAT) + "\n")
    res = subprocess.run(
        [sys.executable, "-m", "flows.cli", "ingest", str(d), "--lake", str(tmp_path / "lake"),
         "--format", "openai_chat"],
        cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "records read 3 = accepted 1 + quarantined 2" in out and "refused 2" in out
    reasons = query(
        Lake(str(tmp_path / "lake")), "SELECT reason, detail FROM quarantine"
    ).to_pylist()
    assert sorted((r["reason"], r["detail"]) for r in reasons) == [
        ("not_a_regular_file", "a FIFO"),
        ("outside_input", "points into /dev (/dev/zero)"),  # a symlink out of the folder
    ]


def _many_files(d: Path, n: int, records: int) -> None:
    d.mkdir(parents=True)
    line = (json.dumps(CHAT) + "\n").encode()
    for i in range(n):
        rows = [line.replace(b'"a"}', f'"a{i}-{j}"}}'.encode()) for j in range(records)]
        (d / f"f{i:03d}.jsonl").write_bytes(b"".join(rows))


def test_sigterm_stops_ingest_at_a_safe_point_and_a_rerun_finishes(tmp_path, cli_env):
    inputs, lake = tmp_path / "in", tmp_path / "lake"
    _many_files(inputs, 16, 2000)  # ~0.2 s a file: the signal lands with most of them to go
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "ph"))
    cmd = [sys.executable, "-m", "flows.cli", "ingest", str(inputs), "--lake", str(lake)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = lake / "tables" / "ingest_log"
    t0 = time.monotonic()
    while not (log.is_dir() and any(log.glob("*.parquet"))) and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    server = prefect_servers_of(proc.pid)
    proc.send_signal(15)
    out, errs = proc.communicate(timeout=30)
    assert proc.returncode == 143, errs.decode()[-2000:]
    assert b"stopped" in errs and b"rerun to continue" in errs
    committed = len(list(log.glob("*.parquet")))
    assert 1 <= committed < 16
    assert not [p for p in lake.rglob(".*") if p.is_file() and p.name != ".lock"]  # no temp part
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{p}").exists() for p in server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server and not prefect_servers_of(proc.pid)  # its server went with it
    again = subprocess.run(cmd, cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert query(Lake(str(lake)), "SELECT count(*) n FROM trajectories").to_pylist() == [
        {"n": 16 * 2000}
    ]


def test_kill_9_leaves_no_prefect_server_behind(tmp_path):
    inputs = tmp_path / "in"
    _many_files(inputs, 2, 10)
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "ph"))
    cmd = [sys.executable, "-m", "flows.cli", "ingest", str(inputs), "--lake", str(tmp_path / "l")]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    t0 = time.monotonic()
    while not prefect_servers_of(proc.pid) and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    server = prefect_servers_of(proc.pid)
    assert server, "the run never started its server"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while prefect_servers_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert prefect_servers_of(proc.pid) == []  # once ~330 MB left running after every kill
