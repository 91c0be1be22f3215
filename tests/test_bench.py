"""Every benchmark script runs as docs/benchmarks.md writes it (`python bench/NAME.py`): a
script in bench/ named like a package of the project, or like a standard-library module
(`select.py`), once shadowed it for all the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("*.py"))
PACKAGES = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()}


def test_no_bench_script_shadows_a_package_or_the_standard_library():
    """`python bench/X.py` puts bench/ first on sys.path: a bench/select.py is every script's
    `import select` (the sandbox's pipes then fail with a TypeError)."""
    stems = {Path(s).stem for s in SCRIPTS}
    assert not stems & PACKAGES
    assert not stems & set(sys.stdlib_module_names)


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_help_runs_as_documented(script):
    res = subprocess.run(
        [sys.executable, f"bench/{script}", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "usage:" in res.stdout
