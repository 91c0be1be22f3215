"""Diversity in bits: the Shannon entropy of each feature dimension and of their joint, and the
verdict against the target (which dimensions fall short)."""

from __future__ import annotations

import math
from collections import Counter

from pipeline.diversity.config import DiversityConfig


def bits(values: list) -> float:
    """Shannon entropy (bits) of a list of labels."""
    return bits_of_counts(Counter(values).values())


def bits_of_counts(counts) -> float:
    """Shannon entropy (bits) of a distribution given as counts (zeros allowed)."""
    counts = [c for c in counts if c > 0]
    n = sum(counts)
    return max(0.0, -sum(c / n * math.log2(c / n) for c in counts)) if n else 0.0


def profile(rows: list[dict], config: DiversityConfig) -> dict:
    """Bits per dimension and jointly, over ``rows`` (dicts holding the dimensions)."""
    dims = config.dimensions
    return {
        "questions": len(rows),
        "bits": {d: round(bits([r.get(d) for r in rows]), 4) for d in dims},
        "joint_bits": round(bits([tuple(r.get(d) for d in dims) for r in rows]), 4),
        "values": {d: len({r.get(d) for r in rows}) for d in dims},
    }


def verdict(selected: dict, supply: dict, config: DiversityConfig) -> dict:
    """The target check of a selection's profile: short dimensions (below
    ``min_dimension_bits``, with the supply's own figure beside) and a warning when the joint
    entropy misses ``target_bits``."""
    short = [d for d in config.dimensions if selected["bits"][d] < config.min_dimension_bits]
    meets = selected["joint_bits"] >= config.target_bits
    warning = None
    if not meets:
        named = ", ".join(
            f"{d} {selected['bits'][d]:.2f} bits ({supply['values'][d]} value"
            f"{'s' if supply['values'][d] != 1 else ''} in the supply)"
            for d in short
        )
        warning = (
            f"diversity {selected['joint_bits']:.2f} bits (joint over "
            f"{len(config.dimensions)} dimensions) is below the target {config.target_bits:g}: "
            + (f"short: {named}" if short else "every dimension is spread, the supply is small")
            + "; add questions from other domains, sources or tool patterns (docs/datasets.md#diversity)"
        )
    return {
        "target_bits": config.target_bits,
        "meets_target": meets,
        "short_dimensions": short,
        "warning": warning,
    }


def _at(p: dict, d: str) -> float | None:
    return p.get("joint_bits") if d == "joint" else p.get("bits", {}).get(d)


def side_by_side(div: dict) -> list[dict]:
    """Rows of a diversity section (one per dimension, then the joint): bits in the supply, in
    this version and in the previous one (None where it had no profile), for the build output,
    its artifact and the run report."""
    prev = div.get("previous") or {}
    col = f"v{prev['version']}" if prev else "previous"
    return [
        {
            "dimension": d,
            "supply": _at(div["supply"], d),
            "selected": _at(div["selected"], d),
            col: _at(prev, d) if prev else None,
        }
        for d in [*div["dimensions"], "joint"]
    ]
