"""Model import: a GGUF file (the packaged SmolLM2-135M-Instruct by default) as a trainable
Hugging Face folder, checked by equal logits against the GGUF-loaded model."""

from pipeline.model_import.config import ImportConfig
from pipeline.model_import.errors import ModelImportError
from pipeline.model_import.stage import import_gguf, packaged_gguf

__all__ = ["ImportConfig", "ModelImportError", "import_gguf", "packaged_gguf"]
