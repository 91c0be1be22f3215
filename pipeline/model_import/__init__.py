"""Model import: a GGUF file (the packaged SmolLM2-135M-Instruct by default) as a trainable
Hugging Face folder, checked by equal logits against the GGUF-loaded model."""

from pipeline.model_import.config import ImportConfig
from pipeline.model_import.errors import ModelImportError

__all__ = ["ImportConfig", "ModelImportError", "import_gguf", "packaged_gguf"]


_STAGE = {"import_gguf", "packaged_gguf"}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.model_import.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
