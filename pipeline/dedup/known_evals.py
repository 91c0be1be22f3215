"""Well-known evaluation sets, recognised wherever their items turn up.

Registering a pool (``flow ingest --eval-set``) keeps *that pool's* questions out of training, but
an evaluation set's items also come in as other people's trajectories and attempts: ToRA's
``gsm8k/test_*.jsonl`` outputs, model solutions of GSM8K test, rollouts on MATH-500. Those rows
carry no dataset name, so dedup recognises them two more ways:

* by **path**: a source file under a folder or with a name that says it holds a well-known test
  split (``gsm8k/test_tora.jsonl``, ``math500``, ``aime_2024``, ``gpqa``, BFCL's data, tau-bench's
  airline or test tasks);
* by **content**: the question's id (the hash of its normalised text, ``pipeline.lake.ids``)
  against the lists packaged here (the first 16 hex digits of each id; rebuilt from the question
  files with ``python -m pipeline.dedup.known_evals QUESTIONS_DIR``).

A recognised question counts as a member of that evaluation set in dedup: kept out of training
when the set is among ``DedupConfig.eval_sets`` (the defaults hold out all of them), and said
loudly when it is not (the user opted in to train on it).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

KNOWN = (
    "gsm8k/test",
    "math500",
    "aime2024",
    "aime2025",
    "amc2023",
    "gpqa",
    "bfcl",
    "tau_bench/test",
)
"""The well-known evaluation sets dedup recognises; the dedup defaults hold out all of them."""

_FOLDER = Path(__file__).parent / "known_eval_ids"
# (set, the question file under a question-pool folder) the packaged lists are built from
LISTS = {
    "gsm8k/test": "gsm8k/test.jsonl",
    "math500": "math500/test.jsonl",
    "aime2024": "aime2024/test.jsonl",
    "amc2023": "amc2023/test.jsonl",
}
_PREFIX = 16  # hex digits of a question id kept in the lists (64 bits: no chance collision)

# a test-split path: a segment naming the set, then (for sets with a train split) a segment or
# file name that is "test" or starts with it as a word ("test_tora", "test-00", not "testing",
# "latest" or "contest"); names end at a non-alphanumeric character ("math500", not
# "openmath_500k")
_T = r"test(?:[-_.][^/]*)?$"
_END = r"(?![0-9a-z])"
_PATHS: tuple[tuple[str, re.Pattern], ...] = (
    ("gsm8k/test", re.compile(rf"(?:^|/)gsm8k[^/]*/(?:[^/]+/)*{_T}|gsm8k[-_.]test{_END}")),
    ("math500", re.compile(rf"(?:^|[^0-9a-z])math[-_]?500{_END}")),
    ("aime2024", re.compile(rf"(?:^|[^0-9a-z])aime[-_]?(?:20)?24{_END}")),
    ("aime2025", re.compile(rf"(?:^|[^0-9a-z])aime[-_]?(?:20)?25{_END}")),
    ("amc2023", re.compile(rf"(?:^|[^0-9a-z])amc[-_]?(?:20)?23{_END}")),
    ("gpqa", re.compile(r"(?:^|[^0-9a-z])gpqa")),
    ("bfcl", re.compile(r"(?:^|[^0-9a-z])bfcl|berkeley-function-call-leaderboard")),
    # tau-bench's airline domain has only test tasks; retail's test split is tasks_test
    (
        "tau_bench/test",
        re.compile(r"tau[-_]?bench/(?:[^/]+/)*[^/]*(?:airline|(?:^|[-_./])test(?:[-_.]|$))[^/]*$"),
    ),
)
_DEPTH = 4  # path segments read, from the file up: a far parent (~/bfcl-finetune/) says nothing


def by_path(uri: str | None) -> set[str]:
    """The well-known evaluation sets a source file's path says it holds (its last few
    segments: the file and the folders it sits in)."""
    if not uri:
        return set()
    path = "/".join(uri.replace("\\", "/").lower().split("/")[-_DEPTH:])
    return {name for name, pattern in _PATHS if pattern.search(path)}


def by_dataset(name: str | None) -> set[str]:
    """A question pool's dataset name read as a well-known set (``bfcl_simple`` -> bfcl)."""
    if not name:
        return set()
    return by_path("/" + name) | ({"bfcl"} if name.lower().startswith("bfcl") else set())


def _file(name: str) -> Path:
    return _FOLDER / f"{name.replace('/', '-')}.txt"


@lru_cache(maxsize=1)
def _ids() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for name in LISTS:
        path = _file(name)
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                out.setdefault(line, []).append(name)
    return {k: tuple(v) for k, v in out.items()}


def by_content(question_id: str | None) -> set[str]:
    """The packaged well-known sets whose question list holds this question id."""
    if not question_id:
        return set()
    return set(_ids().get(question_id[:_PREFIX], ()))


def recognise(question_id: str | None, uris: list[str] | None) -> dict[str, str]:
    """{set: how} for each well-known set the question belongs to (``content`` first, else
    ``path``)."""
    out = {name: "content" for name in by_content(question_id)}
    for uri in uris or []:
        for name in by_path(uri):
            out.setdefault(name, "path")
    return out


def build_lists(questions: str | Path) -> dict[str, int]:
    """Write the packaged lists from a question-pool folder (``<set>/test.jsonl`` files with a
    ``question`` or ``problem`` field); returns the count per set."""
    import orjson

    from pipeline.lake.ids import question_id

    counts = {}
    for name, rel in LISTS.items():
        src = Path(questions, rel)
        rows = [orjson.loads(line) for line in src.read_text().splitlines() if line.strip()]
        ids = sorted({question_id(r.get("question") or r.get("problem"))[:_PREFIX] for r in rows})
        _file(name).write_text(
            f"# {name}: the first {_PREFIX} hex digits of pipeline.lake.ids.question_id of each "
            f"question in {rel} ({len(ids)} distinct)\n" + "\n".join(ids) + "\n"
        )
        counts[name] = len(ids)
    _ids.cache_clear()
    return counts


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit(
            "usage: python -m pipeline.dedup.known_evals QUESTIONS_DIR (e.g. ../shared/data/questions)"
        )
    for name, n in build_lists(sys.argv[1]).items():
        print(f"{name}: {n} questions")
