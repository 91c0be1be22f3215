"""The build stage: a versioned, checksummed dataset (RL and SFT splits, exports, manifest)."""

from pipeline.build.config import BuildConfig, check_name
from pipeline.build.errors import BuildError
from pipeline.build.stage import build, lake_sft_rows, next_version

__all__ = ["BuildConfig", "BuildError", "build", "check_name", "lake_sft_rows", "next_version"]
