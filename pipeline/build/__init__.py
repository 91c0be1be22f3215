"""The build stage: a versioned, checksummed dataset (RL and SFT splits, exports, manifest)."""

from pipeline.build.config import BuildConfig, check_name
from pipeline.build.errors import BuildError

__all__ = ["BuildConfig", "BuildError", "build", "check_name", "lake_sft_rows", "next_version"]


_STAGE = {"build", "lake_sft_rows", "next_version"}


def __getattr__(attr: str):
    """The stage loads on first use: importing the config (the command line does, for its
    options) does not load the stage's libraries."""
    if attr in _STAGE:
        import importlib

        return getattr(importlib.import_module("pipeline.build.stage"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
