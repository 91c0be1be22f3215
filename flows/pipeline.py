"""The ``pipeline`` flow: ingest -> validate -> dedup -> label -> build (-> train), one subflow per
stage, then the run report (HTML + PNG in the lake, and Prefect artifacts). With a
``MissionConfig`` (what `flow run` passes by default) it is the whole mission: ingest ->
validate -> dedup -> sft -> label (live K rollouts of the SFT policy) -> build -> train -> eval
(see ``flows/mission.py``).

Each stage is cached on the content of what it reads (see ``flows/caching.py``), so a rerun with
nothing new does no stage work, and a run killed in any stage resumes from that stage's last
committed unit of work. A stage that fails for good fails the run with the stage's name and
reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, runtime
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from flows.build import build_flow
from flows.dedup import dedup_flow
from flows.ingest import ingest_flow
from flows.label import label_flow
from flows.mission import DATA_STAGES, MissionConfig
from flows.mission import STAGES as MISSION_STAGES
from flows.progress import locked, report
from flows.runners import task_runner
from flows.validate import validate_flow
from pipeline.build import BuildConfig
from pipeline.build.select import SelectConfig
from pipeline.dedup import DedupConfig
from pipeline.demo.nano import EVAL_SET
from pipeline.label import LabelConfig, model_revision
from pipeline.lake import Lake, resolve_root
from pipeline.lake.latest import latest_dataset, latest_sft
from pipeline.report import conservation, stage_summary, write_report
from pipeline.rollout.engines import Sampling

DEMO_DIR = "data/demo"


STAGES = DATA_STAGES
EXTRA = ("record", "train")  # stages a run names explicitly: the recorder's commit, training
ORDER = ("record", *STAGES, "train")


def _read_manifest(lake: Lake, path: str) -> dict:
    import orjson

    with lake.fs.open(f"{path}/manifest.json", "rb") as f:
        return orjson.loads(f.read()) | {"path": path}


class StageFailed(RuntimeError):
    """A stage failed after its retries; the message names the stage and the reason."""


def _stage(name: str, fn: Any, results: dict, rows: dict, /, **params: Any) -> dict:
    report("stage", name)
    t0 = time.perf_counter()
    state = fn(**params, return_state=True)
    if not state.is_completed():
        try:
            state.result()
        except Exception as e:  # noqa: BLE001 - re-raised with the stage's name
            raise StageFailed(f"stage {name} failed: {type(e).__name__}: {e}") from e
        raise StageFailed(f"stage {name} ended {state.name}: {state.message}")
    out = state.result()
    results[name] = out
    rows[name] = {
        "state": out.get("state", "Completed") if isinstance(out, dict) else "Completed",
        "seconds": round(time.perf_counter() - t0, 2),
    } | stage_summary(name, out)
    return out


@dataclass
class _Run:
    """What one run's stages share: where they work, what they hand on to the next stage."""

    root: str
    lake: Lake
    inputs: list[str] | None
    policy: str | None  # the labelling policy; in a mission, the SFT stage's output
    dataset: str
    mapped: Callable[[Any], Any]  # a flow whose work is mapped over partitions, on the runner
    mission: MissionConfig | None
    k: int = 8
    train_model: str | None = None
    train_steps: int = 20
    train_options: dict | None = None
    manifest: dict | None = None
    results: dict[str, dict] = field(default_factory=dict)
    rows: dict[str, dict] = field(default_factory=dict)

    def the_policy(self) -> str:
        self.policy = self.policy or latest_sft(self.lake)
        return self.policy

    def the_dataset(self) -> str:
        return self.manifest["path"] if self.manifest else latest_dataset(self.lake, self.dataset)


@dataclass
class _Step:
    """A stage's flow and its parameters, or why it has nothing to do; ``after`` sees its output."""

    flow: Any = None
    params: dict = field(default_factory=dict)
    skipped: str | None = None
    after: Callable[[dict], None] | None = None


def _record(run: _Run) -> _Step:
    from flows.record import record_flow

    return _Step(record_flow, {"lake": run.root})


def _ingest(run: _Run) -> _Step:
    def register_eval_set(_: dict) -> None:
        from pipeline.lake.eval_sets import pools, register

        m = run.mission
        known = set(pools(run.lake))  # held out from training by every later dedup
        register(run.lake, [e for e in (m.eval_set, *m.more_eval_sets) if e in known])

    return _Step(
        run.mapped(ingest_flow),
        {"paths": run.inputs, "lake": run.root},
        after=register_eval_set if run.mission else None,
    )


def _validate(run: _Run) -> _Step:
    return _Step(validate_flow, {"lake": run.root})


def _dedup(run: _Run) -> _Step:
    m = run.mission
    if m is None or m.dedup_eval_sets is None:
        return _Step(run.mapped(dedup_flow), {"lake": run.root})
    config = DedupConfig(eval_sets=m.dedup_eval_sets)  # beside the lake's registered sets

    def say_what_trains(_: dict) -> None:
        if m.heldout_gsm8k and "gsm8k/test" not in m.dedup_eval_sets:
            run.results.setdefault("mission", {"warnings": []})["warnings"].append(
                f"GSM8K test is training data in this run (ToRA's solutions of it are SFT "
                f"rows), except its first {m.heldout_gsm8k} questions, held out as "
                "gsm8k_heldout: compare its GSM8K figures with nothing reported on GSM8K test"
            )

    return _Step(
        run.mapped(dedup_flow), {"lake": run.root, "config": config}, after=say_what_trains
    )


def _sft(run: _Run) -> _Step:
    from flows.sft import sft_flow
    from trainer.sft import SFTTrainConfig

    m = run.mission

    def hand_on(out: dict) -> None:
        run.policy = out["policy"]

    config = SFTTrainConfig(
        out=f"{run.root}/runs/sft-{{key}}",
        model=base_model(run.lake, m.base_model),
        steps=m.sft_steps,
        batch_size=m.sft_batch,
        lr=m.sft_lr,
        lora_rank=m.lora_rank,
        max_length=m.sft_max_length,
        agent=m.agent,
        seed=m.seed,
        **m.sft_options,
    )
    params = {"lake": run.root, "config": config}
    return _Step(sft_flow, params, after=hand_on)


def _label(run: _Run) -> _Step:
    m = run.mission
    if m is None:
        return _Step(
            label_flow, {"lake": run.root, "config": LabelConfig(policy=run.policy, k=run.k)}
        )
    config = LabelConfig(
        policy=run.the_policy(),
        k=m.k,
        backend=m.backend,
        limit=m.label_limit,
        datasets=m.label_datasets,
        sampling=Sampling(temperature=m.temperature, max_tokens=m.max_tokens, seed=m.seed),
        agent=m.agent,
    )
    return _Step(label_flow, {"lake": run.root, "config": config})


def _build(run: _Run) -> _Step:
    def keep(out: dict) -> None:
        run.manifest = out

    if run.mission is None:
        # the labels this run stands for: a policy's rollouts, else the recorded attempts
        # (never the live labels an earlier mission left in the lake)
        source = "rollouts" if run.policy else "recorded"
        config = BuildConfig(name=run.dataset, label_source=source)
        return _Step(build_flow, {"lake": run.root, "config": config}, after=keep)
    config = BuildConfig(
        name=run.dataset,
        system_prompt=run.mission.agent.system_prompt,
        label_source="rollouts",
        label_revision=model_revision(run.the_policy()),  # this policy's pass rates only
        select=SelectConfig(size=run.mission.rl_size),
    )
    return _Step(build_flow, {"lake": run.root, "config": config}, after=keep)


def _train(run: _Run) -> _Step:
    from flows.train import train_flow
    from trainer.config import TrainConfig

    path = run.the_dataset()
    version = path.rstrip("/").rsplit("/", 1)[-1]
    m = run.mission
    if m is None:
        config = TrainConfig(
            dataset=path,
            model=run.train_model,
            out=f"{run.root}/runs/{run.dataset}-{version}",
            steps=run.train_steps,
            **(run.train_options or {}),
        )
        return _Step(train_flow, {"config": config})
    policy = run.the_policy()
    if (run.manifest or _read_manifest(run.lake, path))["rl"]["rows"] == 0:
        return _Step(
            skipped=f"train skipped: {path} has no RL rows (every labelled question was 0/K or "
            "K/K for this policy; see the pass-rate histogram)"
        )
    config = TrainConfig(
        dataset=path,
        model=policy,
        out=f"{run.root}/runs/{run.dataset}-{version}-grpo-" + _train_key(policy, m),
        steps=m.train_steps,
        prompts_per_step=m.prompts_per_step,
        group_size=m.group_size,
        lr=m.lr,
        max_tokens=m.max_tokens,
        rollout_backend=m.train_backend,
        agent=m.agent,
        temperature=m.temperature,
        seed=m.seed,
        **m.train_options,
    )
    return _Step(train_flow, {"config": config})


def _eval(run: _Run) -> _Step:
    from pipeline.evaluate.config import EvalConfig
    from pipeline.evaluate.sets import held_out

    m = run.mission
    sets = [e for e in (m.eval_set, *m.more_eval_sets) if held_out(run.lake, e, 1)]
    if not sets:
        return _Step(
            skipped=f"eval skipped: the lake has no questions of the evaluation set "
            f"{m.eval_set!r} (ingest a held-out pool with `flow ingest PATH "
            f"--eval-set {m.eval_set}`)"
        )
    models = [(run.the_policy(), "sft")]
    if "train" in run.results:
        models.append((f"{run.results['train']['out']}/checkpoint-latest", "grpo"))
    configs = [
        EvalConfig(
            eval_set=e,
            k=m.eval_k,
            limit=m.eval_limit,
            agent=m.agent,
            sampling=Sampling(temperature=m.temperature, max_tokens=m.max_tokens, seed=m.seed),
            backend=m.backend,
        )
        for e in sets
    ]
    return _Step(evals_flow, {"models": models, "configs": configs, "lake": run.root})


@flow(name="evaluate-sets")
def evals_flow(models: list[tuple[str, str]], configs: list, lake: str) -> dict:
    """The models on each held-out set (one ``evaluate`` subflow per set); rows carry their
    set's name, the first set's summary leads."""
    from flows.evaluate import eval_flow

    outs = [eval_flow(models, config=c, lake=lake) for c in configs]
    rows = [r | {"eval_set": o["eval_set"]} for o in outs for r in o["rows"]]
    state = "Cached" if all(o["state"] == "Cached" for o in outs) else "Completed"
    return outs[0] | {
        "eval_set": ", ".join(o["eval_set"] for o in outs),
        "questions": sum(o["questions"] for o in outs),
        "rows": rows,
        "state": state,
        "sets": outs,
    }


STEPS: dict[str, Callable[[_Run], _Step]] = {
    "record": _record,
    "ingest": _ingest,
    "validate": _validate,
    "dedup": _dedup,
    "sft": _sft,
    "label": _label,
    "build": _build,
    "train": _train,
    "eval": _eval,
}


def _todo(
    stages: list[str] | None,
    mission: MissionConfig | None,
    until: str | None,
    policy: str | None,
    train_model: str | None,
) -> list[str]:
    """The stages this run executes, in order; unknown names are refused with the known ones."""
    if mission is None:
        todo = list(stages or STAGES) + (["train"] if train_model and not stages else [])
        unknown = set(todo) - set(ORDER)
        if unknown:
            raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages: {', '.join(ORDER)}")
        if "train" in todo and not train_model:
            raise ValueError("the train stage needs train_model (the SFT policy's folder)")
        return [s for s in ORDER if s in todo]
    todo = list(stages or MISSION_STAGES)
    unknown = set(todo) - set(MISSION_STAGES) | ({until} - set(MISSION_STAGES) if until else set())
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages: {', '.join(MISSION_STAGES)}")
    if until:
        todo = [s for s in todo if MISSION_STAGES.index(s) <= MISSION_STAGES.index(until)]
    if policy:  # a given policy replaces the SFT stage
        todo = [s for s in todo if s != "sft"]
    return todo


@flow(name="pipeline")
@locked
def pipeline_flow(
    inputs: list[str] | None = None,
    lake: str | None = None,
    policy: str | None = None,
    dataset: str = "demo",
    runner: str = "threads",
    workers: int | None = None,
    address: str | None = None,
    k: int = 8,
    stages: list[str] | None = None,
    train_model: str | None = None,
    train_steps: int = 20,
    train_options: dict | None = None,
    write_run_report: bool = True,
    mission: MissionConfig | None = None,
    until: str | None = None,
) -> dict:
    """The pipeline on ``inputs`` (default: the demo corpus): recorded labels, or K live rollouts
    of ``policy``; publishes ``datasets/<dataset>/v<N>``; with ``train_model``, GRPO-TCR on the
    newest version. ``stages`` runs a subset in order (scheduled deployments do: ingest every few
    minutes, curation nightly, ...). With ``mission`` it is the whole mission (sft, live labels,
    train, eval; ``until`` stops after a stage). Returns per-stage summaries and the report's
    path."""
    root = resolve_root(lake)
    todo = _todo(stages, mission, until, policy, train_model)
    if not inputs and "ingest" in todo:
        inputs = [demo_inputs(None)] if mission is None else mission_inputs(mission)
    run = _Run(
        root=root,
        lake=Lake(root),
        inputs=inputs,
        policy=policy,
        dataset=dataset,
        mapped=lambda fl: fl.with_options(task_runner=task_runner(runner, workers, address)),
        mission=mission,
        k=k,
        train_model=train_model,
        train_steps=train_steps,
        train_options=train_options,
    )
    for stage in todo:
        try:
            step = STEPS[stage](run)
        except ValueError as e:  # the stage's config refused what this run gives it
            raise StageFailed(f"stage {stage} failed: {type(e).__name__}: {e}") from e
        if step.skipped:
            _skipped(stage, step.skipped, run.results, run.rows)
            continue
        out = _stage(stage, step.flow, run.results, run.rows, **step.params)
        if step.after:
            step.after(out)
    return _finish(run.lake, dataset, run.manifest, run.results, run.rows, write_run_report)


def demo_inputs(nano: dict | None, folder: str = DEMO_DIR) -> str:
    """The demo corpus folder, written when missing (with ``nano``: the nano task family too,
    written by ``write_nano(**nano)``, whose solver trajectories run in the sandbox)."""
    from pipeline.demo import write_demo

    if not Path(folder).exists():
        write_demo(folder)
    if nano is not None and not Path(folder, "questions", EVAL_SET).exists():
        from pipeline.demo.nano import write_nano
        from pipeline.sandbox import Sandbox

        with Sandbox(MissionConfig().agent.sandbox, 2) as box:
            write_nano(folder, box, **nano)
    return folder


def mission_inputs(mission: MissionConfig) -> list[str]:
    """The mission's inputs: its demo corpus with the nano family, the held-out GSM8K slice
    written there as a pool, and the real data it names under the shared data folder."""
    folder = demo_inputs(mission.nano, mission.demo_dir)
    shared = shared_data()
    if mission.heldout_gsm8k:
        heldout = Path(folder, "questions", "gsm8k_heldout", "test.jsonl")
        if not heldout.exists():
            lines = (shared / "questions/gsm8k/test.jsonl").read_text().splitlines()
            heldout.parent.mkdir(parents=True, exist_ok=True)
            tmp = heldout.with_suffix(".tmp")
            tmp.write_text("\n".join(lines[: mission.heldout_gsm8k]) + "\n")
            tmp.replace(heldout)
    missing = [p for p in mission.shared_inputs if not (shared / p).exists()]
    if missing:
        raise FileNotFoundError(
            f"the mission's real data is not under {shared}: {', '.join(missing)} (set "
            "FLOW_SHARED_DATA to the folder that holds it)"
        )
    return [folder, *(str(shared / p) for p in mission.shared_inputs)]


def shared_data() -> Path:
    """The shared real data: FLOW_SHARED_DATA, else ../shared/data beside this checkout."""
    import os

    given = os.environ.get("FLOW_SHARED_DATA")
    return Path(given) if given else Path(__file__).resolve().parents[2] / "shared" / "data"


def base_model(lake: Lake, name: str | None) -> str | None:
    """The folder SFT starts from: None (the nano policy), the packaged SmolLM2 imported into
    the lake's models folder once ("smollm2"), or a folder as given."""
    if name != "smollm2":
        return name
    from pipeline.model_import import ImportConfig, import_gguf

    return import_gguf(ImportConfig(), lake.path("models"))["path"]


def _skipped(stage: str, why: str, results: dict, rows: dict) -> None:
    """A mission stage with nothing to work on: its row says why, and so do the warnings."""
    results.setdefault("mission", {"warnings": []})["warnings"].append(why)
    rows[stage] = {"state": "Skipped", "seconds": 0.0, "reason": why}


def _train_key(policy: str, mission: MissionConfig) -> str:
    """A GRPO run folder per (starting weights, training settings): a finished run with the
    same key is resumed (nothing to do); another policy or lr starts its own run."""
    import orjson

    from pipeline.lake.ids import digest

    blob = {
        "revision": model_revision(policy),
        "agent": asdict(mission.agent),
        "train": {
            k: getattr(mission, k)
            for k in (
                "train_steps",
                "prompts_per_step",
                "group_size",
                "lr",
                "temperature",
                "max_tokens",
                "train_backend",
                "train_options",
                "seed",
            )
        },
    }
    return digest(orjson.dumps(blob, default=str, option=orjson.OPT_SORT_KEYS), 8)


def _finish(
    lk: Lake,
    dataset: str,
    manifest: dict | None,
    results: dict,
    rows: dict,
    write_run_report: bool,
) -> dict:
    root = lk.root
    training = results.get("train")
    if manifest is None and lk.fs.exists(lk.path("datasets", dataset)):
        manifest = _read_manifest(lk, latest_dataset(lk, dataset))
    if not write_run_report:
        return {"lake": root, "stages": rows, "report": None, "results": results}
    run_name = runtime.flow_run.name or "local"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    cons = conservation(lk, manifest)
    warnings = [w for r in results.values() if isinstance(r, dict) for w in r.get("warnings", [])]
    index = write_report(
        lk,
        lk.path("reports", "runs", f"{stamp}-{run_name}"),
        rows,
        manifest,
        training,
        cons,
        warnings,
        sft=results.get("sft"),
        evaluation=results.get("eval"),
    )
    lines = [
        "# Pipeline run",
        "",
        f"lake `{root}`; report `{index}`",
        "",
        "| stage | state | seconds |",
    ]
    lines += ["|---|---|---|"] + [
        f"| {k} | {v['state']} | {v['seconds']} |" for k, v in rows.items()
    ]
    lines += [
        "",
        "| counts | in | out | quarantined | duplicates | filtered | pending | balanced |",
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(str(v) for v in c.values()) + " |" for c in cons]
    create_markdown_artifact(key="pipeline-run", markdown="\n".join(lines), description=root)
    if lk.is_local:
        create_link_artifact(key="run-report", link=f"file://{index}", link_text="run report")
    return {
        "lake": root,
        "stages": rows,
        "conservation": cons,
        "report": index,
        "results": results,
        "warnings": warnings,
    }
