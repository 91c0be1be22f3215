"""Run the rules of ``schemas/expectations.py`` through Great Expectations 1.x, for real.

One ephemeral context per stage run; one pandas data source with one dataframe asset per table;
one ``ExpectationSuite`` per table whose expectations carry the rule name and severity in
``meta``; one ``Checkpoint`` per table that validates a pandas batch (a chunk of the check frame)
with ``result_format=COMPLETE`` and ``unexpected_index_column_names=["_row", "record_id"]``, so failing
rows come back *by id* from GX (``_row``, the row's position in the chunk, also identifies a row
whose ``record_id`` is null), and that updates a Data Docs site.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import pandas as pd

from schemas.expectations import Rule

log = logging.getLogger(__name__)


@dataclass
class RuleOutcome:
    rule: Rule
    evaluated: int = 0
    failed_rows: list[int] = field(default_factory=list)  # positions in the chunk
    failed_values: list[object] = field(default_factory=list)


def _expectation(rule: Rule):
    import great_expectations.expectations as gxe

    meta = {"rule": rule.name, "severity": rule.severity, "description": rule.description}
    if rule.kind == "true":
        e = gxe.ExpectColumnValuesToBeInSet(column=rule.column, value_set=[True], meta=meta)
    elif rule.kind == "not_null":
        e = gxe.ExpectColumnValuesToNotBeNull(column=rule.column, meta=meta)
    elif rule.kind == "unique":
        e = gxe.ExpectColumnValuesToBeUnique(column=rule.column, meta=meta)
    elif rule.kind == "between":
        e = gxe.ExpectColumnValuesToBeBetween(column=rule.column, meta=meta, **rule.kwargs)
    else:  # pragma: no cover - guarded by the Rule type
        raise ValueError(rule.kind)
    e.description = f"[{rule.severity}] {rule.name}: {rule.description}"
    return e


class GXRunner:
    """Holds the GX context, suites and checkpoints for one stage run."""

    def __init__(self, suites: dict[str, list[Rule]], docs_dir: str | None = None):
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        for name in (
            "great_expectations",
            "great_expectations.data_context.types.base",
            "math_verify",
        ):
            logging.getLogger(name).setLevel(logging.ERROR)
        self.ctx = gx.get_context(mode="ephemeral")
        self.ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.docs_dir = docs_dir
        actions = []
        if docs_dir:
            site = {
                "class_name": "SiteBuilder",
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": docs_dir,
                },
            }
            self.ctx.add_data_docs_site(site_name="lake", site_config=site)
            actions = []  # the site is built once at the end (build_docs), not after every chunk
        source = self.ctx.data_sources.add_pandas("lake")
        self.rules = suites
        self.checkpoints = {}
        for table, rules in suites.items():
            batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("chunk")
            suite = self.ctx.suites.add(gx.ExpectationSuite(name=table))
            for r in rules:
                suite.add_expectation(_expectation(r))
            vd = self.ctx.validation_definitions.add(
                gx.ValidationDefinition(name=f"{table}_chunk", data=batch, suite=suite)
            )
            self.checkpoints[table] = self.ctx.checkpoints.add(
                gx.Checkpoint(
                    name=f"validate_{table}",
                    validation_definitions=[vd],
                    actions=actions,
                    result_format={
                        "result_format": "COMPLETE",
                        "unexpected_index_column_names": ["_row", "record_id"],
                    },
                )
            )

    def validate(self, table: str, frame: pd.DataFrame) -> dict[str, RuleOutcome]:
        """Validate one pandas chunk (with a ``_row`` column); returns failing rows and values per rule."""
        result = self.checkpoints[table].run(batch_parameters={"dataframe": frame})
        out = {r.name: RuleOutcome(r, evaluated=len(frame)) for r in self.rules[table]}
        for vr in result.run_results.values():
            for er in vr.results:
                name = er.expectation_config.meta["rule"]
                if er.exception_info and er.exception_info.get("raised_exception"):
                    raise RuntimeError(
                        f"GX failed on rule {name}: {er.exception_info.get('exception_message')}"
                    )
                if er.success:
                    continue
                col = er.expectation_config.kwargs.get("column")
                for item in er.result.get("unexpected_index_list") or []:
                    out[name].failed_rows.append(int(item["_row"]))
                    out[name].failed_values.append(item.get(col))
        return out

    def build_docs(self) -> None:
        """Render the Data Docs site: suites and every validation result of this run."""
        if self.docs_dir:
            self.ctx.build_data_docs(site_names=["lake"])

    def docs_index(self) -> str | None:
        return os.path.join(self.docs_dir, "index.html") if self.docs_dir else None
