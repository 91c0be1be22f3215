"""The reader interface: recognize a record's shape, map it onto ``records`` types."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, ClassVar

from pipeline.ingest.records import Rec


@dataclass
class Context:
    """What a reader may know about the record besides its value."""

    path: str  # the file's URI
    index: int  # record index in the file
    cache: dict = field(default_factory=dict)  # per-file scratch space (companion files, ...)

    @property
    def parts(self) -> tuple[str, ...]:
        return PurePosixPath(self.path.split("://", 1)[-1]).parts


class Reader:
    """Subclass, set ``name``, implement ``sniff`` and ``parse``; register in ``registry.py`` or
    through the ``flow.readers`` entry-point group.

    ``sniff`` sees the first record of a file (and its path) and says whether this reader owns the
    file. ``parse`` maps one record to canonical records and raises ``RecordError`` for anything
    it cannot map; the record is then quarantined with that reason.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    whole_file: ClassVar[bool] = False  # the file's whole JSON document is one record
    companion: ClassVar[bool] = False  # the file only supplies data to another reader's files

    def sniff(self, sample: Any, path: str) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def parse(self, value: Any, ctx: Context) -> Iterable[Rec]:  # pragma: no cover - interface
        raise NotImplementedError


def has_keys(sample: Any, *keys: str) -> bool:
    return isinstance(sample, dict) and all(k in sample for k in keys)
