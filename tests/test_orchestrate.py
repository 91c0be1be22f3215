"""Orchestration for real: the pipeline flow of subflows, deployments served and triggered through
the API, the no-op rerun, kill -9 and resume, a local Dask cluster, retries and failure reasons.

Each run pins its timestamps with SOURCE_DATE_EPOCH, so two lakes built from the same inputs can
be compared file by file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from pipeline.demo import write_demo
from tests.harness import snapshot

EPOCH = "1780000000"


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("demo") / "agent_runs"
    write_demo(str(out.parent))
    return str(out.parent)


@pytest.fixture(autouse=True)
def pinned_time(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)


def test_pipeline_is_one_flow_of_subflows_and_a_rerun_does_no_stage_work(harness, demo, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.pipeline import pipeline_flow

    lake = tmp_path / "lake"
    state = pipeline_flow(inputs=[demo], lake=str(lake), return_state=True)
    assert state.is_completed(), state.message
    first = state.result()
    assert list(first["stages"]) == ["ingest", "validate", "dedup", "label", "build"]
    assert all(c["balanced"] for c in first["conservation"]), first["conservation"]
    ingest = first["stages"]["ingest"]
    assert ingest["records read"] == ingest["accepted"] + ingest["quarantined"] == 373
    before = snapshot(lake)

    with get_client(sync_client=True) as client:
        parent = client.read_flow_run(state.state_details.flow_run_id)
        runs = client.read_flow_runs()
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["pipeline-run", "run-report"])
            )
        )
    children = [r for r in runs if r.parent_task_run_id is not None]
    assert {r.flow_id for r in runs if r.id == parent.id} and len(children) >= 5
    assert {a.key for a in arts} == {"pipeline-run", "run-report"}
    page = Path(first["report"]).read_text()
    for section in (
        "Sources",
        "Quarantine",
        "Validation",
        "Dedup",
        "Pass rates",
        "Dataset demo v1",
    ):
        assert f"<h2>{section}" in page
    # the pass-rate histogram once: drawn beside the pyramid, not again as its own chart
    folder = Path(first["report"]).parent
    assert (folder / "pyramid.png").read_bytes()[:4] == b"\x89PNG"
    assert not (folder / "pass_rates.png").exists() and "with the pyramid below" in page

    again = pipeline_flow(inputs=[demo], lake=str(lake))
    states = {k: v["state"] for k, v in again["stages"].items()}
    assert states == {
        "ingest": "Completed",  # hashes the six files and finds them all committed
        "validate": "Cached",
        "dedup": "Cached",
        "label": "Cached",
        "build": "Cached",
    }
    assert again["stages"]["ingest"]["new files"] == 0
    assert snapshot(lake) == before  # not one byte of the lake changed, no v2 published


def test_cache_hit_is_not_trusted_when_the_lake_lost_the_output(harness, demo, tmp_path):
    from flows.pipeline import pipeline_flow

    lake = tmp_path / "lake"
    pipeline_flow(inputs=[demo], lake=str(lake), stages=["ingest", "validate", "dedup"])
    want = snapshot(lake)
    shutil.rmtree(lake / "tables/unique_questions")  # someone deletes a derived table
    out = pipeline_flow(inputs=[demo], lake=str(lake), stages=["validate", "dedup"])
    assert out["stages"]["validate"]["state"] == "Cached"
    assert out["stages"]["dedup"]["state"] == "Completed"  # rebuilt, not served from cache
    assert snapshot(lake) == want


def test_changed_input_reruns_only_what_depends_on_it(harness, demo, tmp_path):
    from flows.pipeline import pipeline_flow

    inputs = tmp_path / "in"
    shutil.copytree(demo, inputs)
    lake = tmp_path / "lake"
    pipeline_flow(inputs=[str(inputs)], lake=str(lake))
    extra = inputs / "agent_runs" / "more.jsonl"
    extra.write_text(
        '{"messages": [{"role": "user", "content": "What is 17 * 3?"}, {"role": "assistant", "content": "51"}]}\n'
    )
    out = pipeline_flow(inputs=[str(inputs)], lake=str(lake))
    assert out["stages"]["ingest"]["new files"] == 1
    assert {out["stages"][s]["state"] for s in ("validate", "dedup", "label", "build")} == {
        "Completed"
    }
    assert out["stages"]["validate"]["rows validated"] == 1  # only the new trajectory
    assert all(c["balanced"] for c in out["conservation"])


def test_served_deployments_register_and_a_triggered_run_completes(harness, demo, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    landing = tmp_path / "landing"
    shutil.copytree(demo, landing)
    cfg = tmp_path / "deploy.toml"
    cfg.write_text(
        (Path(__file__).parents[1] / "flows/deployments.toml")
        .read_text()
        .replace('lake = "data/lake"', f'lake = "{tmp_path / "lake"}"')
        .replace('landing = "data/landing"', f'landing = "{landing}"')
        .replace('dataset = "default"', 'dataset = "nightly"')
    )
    env = os.environ | {"PREFECT_API_URL": PREFECT_API_URL.value()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve", "--config", str(cfg)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # SIGINT as in a terminal's foreground job (a shell's background job inherits it ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        names: set[str] = set()
        wanted = {"ingest", "recorded", "curate", "label-build", "full"}
        deadline = time.time() + 120
        while time.time() < deadline and not wanted <= names:  # they register one by one
            with get_client(sync_client=True) as client:
                names = {d.name for d in client.read_deployments()}
            time.sleep(1)
        assert wanted <= names, names
        with get_client(sync_client=True) as client:
            deps = {d.name: d for d in client.read_deployments()}
        assert deps["ingest"].schedules[0].schedule.cron == "*/5 * * * *"
        assert deps["curate"].parameters["stages"] == ["validate", "dedup"]
        assert deps["recorded"].parameters["stages"] == ["record", "validate", "dedup"]
        run = run_deployment("pipeline/full", timeout=300)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it: to the group
        log = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert run.state.is_completed(), log[-3000:]
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    with get_client(sync_client=True) as client:  # Ctrl-C paused the schedules, and only that
        assert all(d.paused for d in client.read_deployments() if d.name in wanted)
    assert (tmp_path / "lake/datasets/nightly/v1/manifest.json").exists()
    assert (tmp_path / "lake/tables/ingest_log").exists()


def test_a_run_already_gone_at_ctrl_c_is_one_line_not_a_traceback():
    """The CI race of the served test above: Ctrl-C reached the run's process before the runner's
    own kill did. Prefect's real process manager, shutting down over a process that has exited."""
    import asyncio
    import logging
    import uuid

    import anyio
    from prefect.runner._process_manager import ProcessHandle, ProcessManager

    from flows.deployments import _quiet_gone_runs

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("prefect.runner.process_manager")
    log.addHandler(handler)

    async def shutdown_over_an_exited_run() -> None:
        proc = await anyio.open_process([sys.executable, "-c", "pass"])
        await proc.wait()  # exited and reaped: its pid names no process
        async with ProcessManager() as manager:
            await manager.add(uuid.uuid4(), ProcessHandle(proc))

    try:
        asyncio.run(shutdown_over_an_exited_run())
        assert [r.exc_info and r.exc_info[0] for r in records] == [ProcessLookupError]  # Prefect's
        records.clear()
        _quiet_gone_runs()
        _quiet_gone_runs()  # once per logger, however often serve() starts
        asyncio.run(shutdown_over_an_exited_run())
    finally:
        log.removeHandler(handler)
        log.filters.clear()
    assert len(records) == 1 and records[0].exc_info is None
    assert records[0].levelno == logging.INFO
    assert "had already exited" in records[0].getMessage()


def _run_argv(lake: Path, demo: str) -> list[str]:
    """`flow run --data-only` on the demo into ``lake``, as a subprocess runs it."""
    return [
        sys.executable,
        "-m",
        "flows.cli",
        "run",
        "--lake",
        str(lake),
        "--inputs",
        demo,
        "--data-only",
    ]


def _flow_run(lake: Path, demo: str, api_url: str) -> subprocess.Popen:
    return subprocess.Popen(
        _run_argv(lake, demo),
        env=os.environ | {"PREFECT_API_URL": api_url, "SOURCE_DATE_EPOCH": EPOCH},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


# Kill points: the first file a stage commits; the kill lands inside that stage or just after
# it, and every later stage is still to run (each stage takes a second or more here).
KILL_POINTS = {
    "ingest": "tables/ingest_log/[!.]*.parquet",
    "validate": "tables/validation/[!.]*.parquet",
    "dedup": "tables/minhash_signatures/[!.]*.parquet",
    "label": "tables/labels/[!.]*.parquet",
}


@pytest.fixture(scope="module")
def reference(harness, demo, tmp_path_factory):
    """An uninterrupted run, through the same CLI subprocess as the killed ones."""
    from prefect.settings import PREFECT_API_URL

    lake = tmp_path_factory.mktemp("reference") / "lake"
    proc = _flow_run(lake, demo, PREFECT_API_URL.value())
    assert proc.wait(timeout=300) == 0
    return snapshot(lake)


# CI kills the first stage and the live one; the same kill-and-rerun of the two between them is
# `slow` (make test-all): the code path (a stage's parts, then its commit) is the same.
IN_CI = ("ingest", "label")


@pytest.mark.parametrize(
    "stage", [s if s in IN_CI else pytest.param(s, marks=pytest.mark.slow) for s in KILL_POINTS]
)
def test_kill_9_during_a_stage_then_rerun_equals_an_uninterrupted_run(
    harness, demo, reference, tmp_path, stage
):
    from prefect.settings import PREFECT_API_URL

    lake = tmp_path / "lake"
    proc = _flow_run(lake, demo, PREFECT_API_URL.value())
    deadline = time.time() + 300
    while (
        time.time() < deadline and proc.poll() is None and not list(lake.glob(KILL_POINTS[stage]))
    ):
        time.sleep(0.005)
    assert proc.poll() is None, f"the run ended before reaching {stage}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert snapshot(lake) != reference  # it really stopped short
    rerun = _flow_run(lake, demo, PREFECT_API_URL.value())
    assert rerun.wait(timeout=300) == 0
    assert snapshot(lake) == reference
    assert not [p for p in lake.rglob(".tmp-*")]


def test_two_runs_at_once_on_one_lake_neither_corrupt_nor_duplicate(
    harness, demo, reference, tmp_path
):
    from prefect.settings import PREFECT_API_URL

    lake = tmp_path / "lake"
    env = os.environ | {"PREFECT_API_URL": PREFECT_API_URL.value(), "SOURCE_DATE_EPOCH": EPOCH}
    cmd = _run_argv(lake, demo)
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    waited = [o for o in outs if "waiting for the lake lock" in o]
    assert len(waited) == 1 and "held by pid" in waited[0]
    assert "dataset=demo v1 (unchanged)" in waited[0]  # the second found the work done
    assert snapshot(lake) == reference
    assert not (lake / "datasets/demo/v2").exists()


def test_lock_wait_times_out_with_a_clear_error(tmp_path):
    from pipeline.lake import Lake, LakeBusy

    lake = Lake(str(tmp_path / "lake"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pipeline.lake import Lake\n"
            "with Lake(sys.argv[1]).lock():\n    print('held', flush=True); time.sleep(60)",
            lake.root,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"held"
        seen = []
        with (
            pytest.raises(LakeBusy, match=rf"locked by another writer \(pid {holder.pid} "),
            lake.lock(timeout=0.5, on_wait=seen.append),
        ):
            pass
        assert seen and f"pid {holder.pid}" in seen[0]
    finally:
        holder.kill()
        holder.wait()
    # the kernel released it with the killed holder (never stale); and it is reentrant
    with lake.lock(timeout=5), lake.lock(timeout=0):
        pass


@pytest.fixture(scope="module")
def threaded(harness, demo, tmp_path_factory):
    from flows.pipeline import pipeline_flow

    lake = tmp_path_factory.mktemp("threads") / "lake"
    with pytest.MonkeyPatch.context() as mp:  # module scope: set up before the autouse pin
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        out = pipeline_flow(inputs=[demo], lake=str(lake), runner="threads")
    return snapshot(lake), out


@pytest.mark.parametrize(
    "runner",
    ["dask", pytest.param("processes", marks=pytest.mark.slow)],  # both map the same tasks
)
def test_a_local_dask_cluster_or_process_pool_gives_the_same_lake_as_threads(
    harness, demo, threaded, tmp_path, runner
):
    from flows.pipeline import pipeline_flow

    out = pipeline_flow(inputs=[demo], lake=str(tmp_path / "lake"), runner=runner, workers=2)
    assert snapshot(tmp_path / "lake") == threaded[0]
    assert out["conservation"] == threaded[1]["conservation"]


def test_whole_pipeline_on_a_copy_of_the_shared_data_conserves_counts(harness, shared, tmp_path):
    from flows.pipeline import pipeline_flow

    copy = tmp_path / "shared"
    shutil.copytree(shared, copy)
    out = pipeline_flow(inputs=[str(copy)], lake=str(tmp_path / "lake"), dataset="shared")
    cons = {c["stage"]: c for c in out["conservation"]}
    assert all(c["balanced"] for c in cons.values()), out["conservation"]
    ingest = cons["ingest: records"]
    assert (ingest["in"], ingest["out"], ingest["quarantined"]) == (17_899, 17_894, 5)
    assert cons["validate: rows"]["pending"] == 0 and cons["validate: rows"]["quarantined"] > 0
    assert cons["dedup: trajectories"]["duplicates"] > 0
    # GSM8K test, MATH-500, AIME are evaluation sets by default: only the remaining labelled
    # questions feed the RL split (tests/test_build.py builds the large one)
    rl = cons["build: rl questions"]
    assert rl["out"] == out["results"]["build"]["rl"]["rows"] > 0
    assert rl["filtered"] == rl["in"] - rl["out"] > 0
    page = Path(out["report"]).read_text()
    assert "tau_bench" in page and "Dataset shared v1" in page


def test_training_stage_adds_curves_to_the_report(harness, demo, tiny_model, tmp_path):
    from flows.pipeline import pipeline_flow

    lake = str(tmp_path / "lake")
    pipeline_flow(inputs=[demo], lake=lake, write_run_report=False)
    out = pipeline_flow(
        lake=lake,
        stages=["train"],
        train_model=tiny_model,
        train_steps=1,
        train_options={"max_tokens": 8, "max_turns": 2, "rollout_backend": "transformers"},
    )
    assert out["stages"]["train"]["steps"] == 1
    folder = Path(out["report"]).parent
    assert (folder / "curves.png").read_bytes()[:4] == b"\x89PNG"
    page = Path(out["report"]).read_text()
    assert "<h2>Training" in page
    # the last step's metrics one per row (a single row of ~35 columns ran off the page), and
    # the manifest's file table aligned: a JSON file's missing row count is an empty cell
    training = page.split("<h2>Training")[1].split("<h2>")[0]
    assert "<th>metric</th><th>value</th>" in training and "<td>accuracy</td>" in training
    for table in re.findall(r"<table>.*?</table>", page):
        widths = {row.count("<td>") + row.count("<th>") for row in table.split("<tr>")[1:]}
        assert len(widths) == 1, table[:300]


def test_prefect_yaml_deploys_the_same_deployments_as_the_serve_config(harness, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL

    from flows.deployments import load

    repo = Path(__file__).parents[1]
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="flow-pool", type="process"))
    env = os.environ | {"PREFECT_API_URL": PREFECT_API_URL.value(), "FLOW_REPO": str(repo)}
    res = subprocess.run(
        [str(Path(sys.executable).with_name("prefect")), "--no-prompt", "deploy", "--all"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    with get_client(sync_client=True) as client:
        deployed = {d.name: d for d in client.read_deployments() if d.work_pool_name == "flow-pool"}
    served = {d.name: d for d in load(repo / "flows/deployments.toml", base=tmp_path)}
    assert set(deployed) == set(served)
    for name, d in served.items():
        crons = [s.schedule.cron for s in deployed[name].schedules]
        assert crons == ([d.cron] if d.cron else []), name
        params = deployed[name].parameters
        assert params["stages"] == d.stages and params["dataset"] == d.parameters["dataset"]
        assert params["write_run_report"] == d.parameters["write_run_report"]
        assert ("inputs" in params) == ("inputs" in d.parameters)
    # a real worker picks up a run of the ingest deployment and runs it to the end (with the
    # file-path entrypoint, flows/pipeline.py loaded as module `pipeline` and every run crashed)
    lake, landing = tmp_path / "lake", tmp_path / "landing"
    (landing / "a").mkdir(parents=True)
    (landing / "a" / "t.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "2+2?"},
                                 {"role": "assistant", "content": "4"}]}) + "\n"
    )  # fmt: skip
    with get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(
            deployed["ingest"].id, parameters={"inputs": [str(landing)], "lake": str(lake)}
        )
    worker = subprocess.run(
        [str(Path(sys.executable).with_name("prefect")), "worker", "start", "--pool",
         "flow-pool", "--run-once"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(run.id).state
    assert state.is_completed(), (state, worker.stdout[-3000:] + worker.stderr[-3000:])
    from pipeline.lake import Lake
    from pipeline.lake.query import query

    assert query(Lake(str(lake)), "SELECT count(*) AS n FROM trajectories").to_pylist() == [
        {"n": 1}
    ]


class FlakyFS:
    """An in-memory filesystem whose first writes fail with EIO: a storage hiccup."""

    failures = 0


def test_transient_storage_errors_are_retried_and_permanent_ones_fail_with_the_stage_name(
    harness, demo, tmp_path
):
    import errno

    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    from flows.caching import retry_transient  # noqa: F401 - the condition under test
    from flows.pipeline import StageFailed, pipeline_flow
    from pipeline.transient import TransientError, is_transient

    class Flaky(MemoryFileSystem):
        protocol = "flaky"
        root_marker = "/"

        def _open(self, path, mode="rb", **kw):
            if "w" in mode and FlakyFS.failures > 0:
                FlakyFS.failures -= 1
                raise OSError(errno.EIO, "injected storage failure", path)
            return super()._open(path, mode, **kw)

    fsspec.register_implementation("flaky", Flaky, clobber=True)
    FlakyFS.failures = 2
    out = pipeline_flow(
        inputs=[demo], lake="flaky://lake", stages=["ingest"], write_run_report=False
    )
    assert FlakyFS.failures == 0  # both injected failures happened, and were retried
    assert out["stages"]["ingest"]["records read"] == 373
    assert out["stages"]["ingest"]["accepted"] + out["stages"]["ingest"]["quarantined"] == 373

    assert is_transient(TimeoutError()) and is_transient(TransientError("engine did not start"))
    assert not is_transient(FileNotFoundError()) and not is_transient(ValueError())
    with pytest.raises(StageFailed, match=r"stage label failed: .*not-a-model"):
        pipeline_flow(
            lake=str(tmp_path / "lake"),
            stages=["label"],
            policy=str(tmp_path / "not-a-model"),
            write_run_report=False,
        )
