"""Models from files a user has: ``flow model import`` (a GGUF file as a trainable folder)."""

from __future__ import annotations

import typer

from flows.cli.common import HELP, LakeOpt, app, console, err, stage_progress
from flows.options import configured
from pipeline.lake import resolve_root
from pipeline.model_import.config import ImportConfig
from pipeline.terminal import esc

model_app = typer.Typer(
    help="Models from local files (no hub): import a GGUF file.",
    no_args_is_help=True,
    context_settings=HELP,
)
app.add_typer(model_app, name="model")


@model_app.command("import")
@configured(ImportConfig, "gguf", "out", arguments=("gguf",))
def import_(config: ImportConfig, lake: LakeOpt = None) -> None:
    """Turn a GGUF file into a Hugging Face folder (float32 safetensors, tokenizer, chat
    template) that SFT, vLLM and the trainer load; written only once its logits match the
    GGUF-loaded model's, and found again by the file's sha256 on a rerun."""
    from pipeline.model_import import ModelImportError, import_gguf

    try:
        with stage_progress("model import"):
            done = import_gguf(config, f"{resolve_root(lake)}/models")
    except (ValueError, ModelImportError) as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    if done["cached"]:
        console.print(f"nothing to do: {esc(done['path'])} already holds this file's import")
    else:
        console.print(
            f"imported {esc(done['source'])}\n"
            f"  -> {esc(done['path'])}\n"
            f"  {done['architecture']}, {done['parameters']:,} parameters, vocabulary "
            f"{done['vocab']:,}, chat template: {'yes' if done['chat_template'] else 'no'}"
            f" (tools declared by its {esc(done.get('tools_declared_by', 'own template'))})\n"
            f"  logits against the GGUF model: max |diff| {done['max_abs_logit_diff']:g}; "
            f"{done['seconds']} s"
        )
    console.print(f"use it: flow sft --model {esc(done['path'])} ...")
