"""What can stop an import, said so the user knows what to install or pass."""


class ModelImportError(RuntimeError):
    """The GGUF file is missing, unreadable by transformers, or its copy did not match it."""
