"""Each stage's config is the one place its options are checked: a bad value raises the stage's
own error naming the option, and the CLI turns it into a usage error before Prefect starts."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from flows.cli import app
from pipeline.build import BuildConfig, BuildError
from pipeline.build.select import SelectConfig
from pipeline.dedup import DedupConfig, DedupError
from pipeline.ingest import IngestConfig, IngestError
from pipeline.label import LabelError, label
from pipeline.lake import Lake
from pipeline.validate import ValidateConfig, ValidateError

runner = CliRunner()


@pytest.mark.parametrize(
    ("make", "error", "option"),
    [
        (lambda: DedupConfig(threshold=0.0), DedupError, "threshold"),
        (lambda: DedupConfig(backend="minhashx"), DedupError, "backend"),
        (lambda: DedupConfig(lsh="annoy"), DedupError, "lsh"),
        (lambda: DedupConfig(num_perm=0), DedupError, "num_perm"),
        (lambda: ValidateConfig(tables=("trajectories", "nope")), ValidateError, "nope"),
        (lambda: ValidateConfig(chunk_rows=0), ValidateError, "chunk_rows"),
        (lambda: IngestConfig(max_records_per_file=0), IngestError, "max_records_per_file"),
        (lambda: BuildConfig(name="../escape"), BuildError, "dataset name"),
        (lambda: SelectConfig(size=0), ValueError, "size must be at least 1"),
    ],
)
def test_a_bad_option_is_refused_by_its_config_with_its_name(make, error, option):
    with pytest.raises(error, match=option):
        make()
    assert issubclass(error, ValueError)  # callers that catch ValueError keep working


def test_live_labelling_without_a_policy_path_is_a_label_error(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    from pipeline.rollout.engines import ScriptedEngine

    engine = ScriptedEngine(AutoTokenizer.from_pretrained(tiny_model), lambda text, turn: "1")
    with pytest.raises(LabelError, match="policy's path"):
        label(Lake(str(tmp_path)), engine=engine)


def test_the_cli_refuses_a_bad_dedup_option_before_prefect_starts(tmp_path):
    t0 = time.perf_counter()
    r = runner.invoke(app, ["dedup", "--lake", str(tmp_path), "--backend", "minhashx"])
    assert r.exit_code == 2, r.output
    assert "backend must be one of auto, datasketch, rensa" in r.output
    assert not (tmp_path / "tables").exists()  # nothing ran
    assert time.perf_counter() - t0 < 30  # no Prefect server was started for it (a hang bound)


def test_a_dataset_name_where_a_folder_is_meant_gets_the_folder_named(tmp_path, monkeypatch):
    """`flow run --dataset` takes a name, `flow sft`/`flow train --dataset` a folder: a name
    given to the latter names the newest version's folder in its error."""
    from trainer.config import SFTTrainConfig, TrainConfig

    for v in ("v1", "v2", "v10"):
        (tmp_path / "lake/datasets/demo" / v / "rl").mkdir(parents=True)
    monkeypatch.setenv("FLOW_LAKE", str(tmp_path / "lake"))
    newest = tmp_path / "lake/datasets/demo/v10"
    with pytest.raises(ValueError, match=f"did you mean --dataset {newest} "):
        SFTTrainConfig(dataset="demo").check_inputs()
    with pytest.raises(ValueError, match="has no rl/ shards") as e:
        TrainConfig(dataset="nothing-here", model=str(tmp_path)).check_inputs()
    assert "did you mean" not in str(e.value)
