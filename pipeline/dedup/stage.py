"""The dedup stage: exact and MinHash-LSH near-duplicates, across sources, with decontamination.

Scopes:

* **questions**: every question text of ``valid_questions``, ``valid_attempts`` and
  ``valid_trajectories``. Exact duplicates share a ``question_id`` already (the hash of the
  normalized text), so the items are the distinct ids; near-duplicates are merged by MinHash LSH.
  Each cluster becomes one ``unique_questions`` row listing every member, dataset and source.
* **trajectories**: exact duplicates by ``trajectory_id`` (content hash), then near-duplicates
  among the remaining ones *of the same question cluster*.
* **contamination**: a cluster holding a question of a registered evaluation set (AIME, AMC,
  MATH-500, GSM8K test, ...) is ``in_eval_set`` and not ``train_eligible``; each of its members
  that is not itself in an evaluation set gets a ``contamination`` row naming the evaluation
  question it matches.

Nothing is deleted: ``dedup_clusters`` maps every member to its representative with the
similarity. Signatures are persisted (``minhash_signatures``, keyed by content id and signature
config), so a later run computes signatures only for new items and gives the same clusters as a
full run. Outputs are rewritten whole (atomically) on every run; they are small.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dedup import known_evals
from pipeline.dedup.clusters import clusters, pick_representatives, question_key, trajectory_key
from pipeline.dedup.config import DedupConfig
from pipeline.dedup.lsh import (
    band_pairs,
    band_params,
    band_partitions,
    datasketch_pairs,
    union_pairs,
)
from pipeline.dedup.minhash import backend as make_backend
from pipeline.dedup.minhash import estimated_jaccard, exact_jaccard, pair_jaccard
from pipeline.lake import Lake
from pipeline.lake.eval_sets import registered
from pipeline.lake.ids import digest
from pipeline.lake.query import query
from pipeline.terminal import plain
from pipeline.verify.ground_truth import normalize_answer


@dataclass
class DedupResult:
    counts: dict[str, int]
    largest_clusters: list[dict]
    per_source: list[dict]
    params: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # said in the CLI, the logs, the report


def no_eval_set_warning(eval_sets: tuple[str, ...]) -> str:
    return (
        f"no evaluation set in the lake (looked for {', '.join(eval_sets) or 'none'}): "
        "decontamination checked only exact copies of the packaged lists (GSM8K test, MATH-500, "
        "AIME 2024, AMC 2023) and well-known test-split paths, no near-duplicates. Ingest the "
        "evaluation questions (e.g. `flow ingest "
        "../shared/data/questions/math500`) or register a pool of your own with `flow ingest PATH "
        "--eval-set NAME` (once) or `flow dedup --eval-set NAME` (this run)"
    )


# ---- signatures ----------------------------------------------------------------------------


def signatures_for(
    lake: Lake, scope: str, ids: list[str], texts: list[str], config: DedupConfig
) -> tuple[np.ndarray, int]:
    """Signatures of ``ids`` (persisted ones reused); returns (uint32 [n, P], newly computed)."""
    key = config.sig_key()
    known: dict[str, bytes] = {}
    for part in lake.parts("minhash_signatures"):
        if part.startswith(f"{scope}-{key}-"):
            t = lake.read_part("minhash_signatures", part)
            known.update(zip(t["item_id"].to_pylist(), t["signature"].to_pylist(), strict=True))
    todo = [i for i, x in enumerate(ids) if x not in known]
    out = np.empty((len(ids), config.num_perm), dtype=np.uint32)
    for i, x in enumerate(ids):
        if x in known:
            out[i] = np.frombuffer(known[x], dtype="<u4")
    if todo:
        be = make_backend(config.resolved_backend(), config.num_perm, 1, config.ngram, config.mode)
        chunks = [
            todo[i : i + config.partition_docs] for i in range(0, len(todo), config.partition_docs)
        ]
        with ThreadPoolExecutor(max_workers=max(1, config.workers)) as pool:
            results = list(pool.map(lambda c: be.signatures([texts[i] for i in c]), chunks))
        for c, sig in zip(chunks, results, strict=True):
            out[c] = sig
        new_ids = [ids[i] for i in todo]
        table = pa.table(
            {
                "scope": [scope] * len(todo),
                "item_id": new_ids,
                "sig_key": [key] * len(todo),
                "signature": [out[i].astype("<u4").tobytes() for i in todo],
            }
        )
        lake.write_part(
            "minhash_signatures",
            f"{scope}-{key}-{digest(''.join(sorted(new_ids)).encode(), 8)}",
            table,
        )
    return out, len(todo)


def signature_jobs(lake: Lake, config: DedupConfig, folder: str) -> list[str]:
    """Write the texts that still lack a signature as job files of ``partition_docs`` items under
    ``folder``; returns their paths. One job is one unit of work for a task runner (threads, a
    Dask or Ray cluster); its output is one ``minhash_signatures`` part named like the job."""
    key = config.sig_key()
    _, q_ids, q_texts = question_items(lake)
    scopes = [("question", q_ids, q_texts)]
    if config.trajectories:
        items, _, _, firsts, texts = trajectory_items(lake, config)
        scopes.append(("trajectory", [items[i]["trajectory_id"] for i in firsts], texts))
    jobs = []
    for scope, ids, texts in scopes:
        known = set()
        for part in lake.parts("minhash_signatures"):
            if part.startswith(f"{scope}-{key}-"):
                t = lake.read_columns("minhash_signatures", part, ["item_id"])
                known.update(t["item_id"].to_pylist())
        todo = sorted({x: t for x, t in zip(ids, texts, strict=True) if x not in known}.items())
        for c in range(0, len(todo), config.partition_docs):
            chunk = todo[c : c + config.partition_docs]
            name = f"{scope}-{key}-{digest(''.join(x for x, _ in chunk).encode(), 8)}"
            path = f"{folder}/{name}.parquet"
            if not lake.fs.exists(path):
                lake.fs.makedirs(folder, exist_ok=True)
                tmp = f"{folder}/.tmp-{name}.parquet"
                with lake.fs.open(tmp, "wb") as f:
                    pq.write_table(
                        pa.table({"item_id": [x for x, _ in chunk], "text": [t for _, t in chunk]}),
                        f,
                    )
                lake.fs.mv(tmp, path)
            jobs.append(path)
    return jobs


def run_signature_job(lake: Lake, path: str, config: DedupConfig) -> int:
    """Signatures of one job file into its ``minhash_signatures`` part; 0 if already there."""
    name = path.rsplit("/", 1)[-1].removesuffix(".parquet")
    if name in lake.parts("minhash_signatures") or not lake.fs.exists(path):
        return 0  # done already (or a stale plan: the stage computes what is missing itself)
    with lake.fs.open(path, "rb") as f:
        job = pq.read_table(f)
    be = make_backend(config.resolved_backend(), config.num_perm, 1, config.ngram, config.mode)
    sigs = be.signatures(job["text"].to_pylist())
    n = job.num_rows
    lake.write_part(
        "minhash_signatures",
        name,
        pa.table(
            {
                "scope": [name.split("-", 1)[0]] * n,
                "item_id": job["item_id"],
                "sig_key": [config.sig_key()] * n,
                "signature": [row.astype("<u4").tobytes() for row in sigs],
            }
        ),
    )
    return n


def candidate_pairs(
    sigs: np.ndarray, config: DedupConfig, groups: np.ndarray | None = None
) -> np.ndarray:
    b, r = band_params(config.threshold, config.num_perm, config.weights)
    if config.lsh == "datasketch":
        be = make_backend("datasketch", config.num_perm)
        pairs = datasketch_pairs(
            sigs, be.lean, config.threshold, config.num_perm, (b, r), config.storage_config
        )
        if groups is not None and len(pairs):
            pairs = pairs[groups[pairs[:, 0]] == groups[pairs[:, 1]]]
        return pairs
    return union_pairs(
        [band_pairs(sigs, r, rng, groups) for rng in band_partitions(b, config.band_partitions)]
    )


def verified(
    pairs: np.ndarray, sigs: np.ndarray, texts: list[str], config: DedupConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose (estimated or exact) Jaccard reaches the threshold, with the similarity."""
    if not len(pairs):
        return pairs, np.zeros(0)
    if config.verify == "exact":
        sim = np.array(
            [exact_jaccard(texts[a], texts[b], config.ngram, config.mode) for a, b in pairs]
        )
    else:
        sim = pair_jaccard(sigs, pairs)
    keep = sim >= config.threshold
    return pairs[keep], sim[keep]


# ---- scopes --------------------------------------------------------------------------------

QUESTION_ITEMS = """
WITH q AS (
  SELECT question_id, question, ground_truth, answer_type, domain, dataset || '/' || coalesce(split, '') AS ds,
         dataset, source, source_uri, ingested_at, 0 AS pri, record_id FROM valid_questions
  UNION ALL SELECT question_id, question, ground_truth, NULL, domain, NULL, NULL, source, source_uri, ingested_at, 1, record_id FROM valid_attempts
  UNION ALL SELECT question_id, question, ground_truth, NULL, domain, NULL, NULL, source, source_uri, ingested_at, 2, record_id FROM valid_trajectories)
-- record_id (a content hash) breaks ties: rows of one file share ingested_at, and scan order is not stable
SELECT question_id,
       first(question ORDER BY pri, ingested_at, source, record_id) AS question,
       first(ground_truth ORDER BY pri, ingested_at, source, record_id) FILTER (WHERE ground_truth IS NOT NULL) AS ground_truth,
       first(answer_type ORDER BY pri, ingested_at, record_id) FILTER (WHERE answer_type IS NOT NULL) AS answer_type,
       first(domain ORDER BY pri, ingested_at, record_id) FILTER (WHERE domain IS NOT NULL) AS domain,
       coalesce(list_sort(list(DISTINCT ds) FILTER (WHERE ds IS NOT NULL)), []::VARCHAR[]) AS datasets,
       coalesce(list_sort(list(DISTINCT dataset) FILTER (WHERE dataset IS NOT NULL)), []::VARCHAR[]) AS dataset_names,
       list_sort(list(DISTINCT source)) AS sources,
       list_sort(list(DISTINCT source_uri) FILTER (WHERE source_uri IS NOT NULL)) AS uris,
       count(*) AS n_rows,
       bool_or(pri = 0) AS from_pool,
       min(ingested_at) AS first_ingested
FROM q GROUP BY question_id ORDER BY question_id
"""


def answer_type_of(ground_truth: str | None) -> str | None:
    """The answer type of a ground truth no question pool typed (attempts and trajectories
    carry only the answer): a letter is judged as a letter, a number as a number, as a pool's
    would be. An environment outcome (a JSON object or list: tau-bench's expected actions) has
    none: no answer verifies against it (the build drops such rows from RL)."""
    if ground_truth is None or ground_truth.lstrip()[:1] in ("{", "["):
        return None
    return normalize_answer(ground_truth)[1]


def _pool_sets(r: dict, eval_sets: tuple[str, ...]) -> set[str]:
    """The evaluation sets a question is in as a pool question (``dataset`` or ``dataset/split``
    named as one, or a well-known set's pool: ``bfcl_simple`` is BFCL)."""
    hits = {e for e in eval_sets for d in r["datasets"] if d == e or d.rstrip("/") == e}
    hits |= {e for e in eval_sets for n in r["dataset_names"] if n == e}
    for d in r["datasets"]:
        hits |= known_evals.by_dataset(d.rstrip("/"))
    return hits


def _in_eval(
    r: dict, eval_sets: tuple[str, ...], seen: dict[str, Counter]
) -> tuple[list[str], list[str]]:
    """(the held-out evaluation sets the question is in, the well-known ones it is in that this
    run trains on). Beside pool names, a question is recognised as a well-known set's item by its
    text (the packaged lists) or its files' paths (``known_evals``); ``seen`` counts those
    recognitions per set and way, for the warnings."""
    pool = _pool_sets(r, eval_sets)
    for name, how in known_evals.recognise(r["question_id"], r["uris"]).items():
        if name not in pool:
            seen.setdefault(name, Counter())[how] += 1
        pool.add(name)
    held = sorted(e for e in pool if e in eval_sets)
    opted = sorted(e for e in pool if e not in eval_sets and e in known_evals.KNOWN)
    return held, opted


def known_eval_warnings(
    seen: dict[str, Counter], trained: Counter, eval_sets: tuple[str, ...]
) -> list[str]:
    """What the recognition found, said loudly: items of well-known evaluation sets that came
    in under other names (held out), and those this run trains on because the user left their
    set out of ``eval_sets``."""

    def each(c: dict[str, Counter]) -> str:
        return ", ".join(
            f"{name} {sum(n.values())} ("
            + ", ".join(f"by {how} {k}" for how, k in sorted(n.items()))
            + ")"
            for name, n in sorted(c.items())
        )

    out = []
    held = {k: v for k, v in seen.items() if k in eval_sets}
    if held:
        out.append(
            f"{sum(sum(v.values()) for v in held.values())} questions from trajectories, attempts "
            f"or other pools are items of well-known evaluation sets: {each(held)}; kept out of "
            "training (not train_eligible). To train on one anyway: `flow dedup "
            "--train-on-eval-set NAME` (DedupConfig.train_on_eval_sets)"
        )
    if trained:
        out.append(
            f"CONTAMINATION: {sum(trained.values())} train-eligible questions are items of "
            f"well-known evaluation sets this run does not hold out: "
            + plain(dict(sorted(trained.items())))
            + "; never report figures on those sets for a model trained on this data"
        )
    return out


def question_items(lake: Lake) -> tuple[list[dict], list[str], list[str]]:
    items = query(lake, QUESTION_ITEMS).to_pylist()
    return items, [r["question_id"] for r in items], [r["question"] or "" for r in items]


def dedup_questions(
    lake: Lake, config: DedupConfig, counts: dict, warnings: list[str]
) -> tuple[list[dict], list[dict], dict[str, str]]:
    items, ids, texts = question_items(lake)
    sigs, new = signatures_for(lake, "question", ids, texts, config)
    pairs, sims = verified(candidate_pairs(sigs, config), sigs, texts, config)
    labels = clusters(len(items), pairs)
    keys = [
        question_key(
            r["ground_truth"] is not None,
            bool(r["from_pool"]),
            len(r["sources"]),
            r["first_ingested"],
            r["question_id"],
        )
        for r in items
    ]
    reps = pick_representatives(labels, keys)
    seen: dict[str, Counter] = {}
    both = [_in_eval(r, config.eval_sets, seen) for r in items]
    evals = [held for held, _ in both]
    members: dict[int, list[int]] = {}
    for i, rep in enumerate(reps):
        members.setdefault(int(rep), []).append(i)
    rows, uniq = [], []
    trained: Counter = Counter()  # train-eligible questions of well-known sets, per set
    rep_of: dict[str, str] = {}
    for rep, mem in sorted(members.items(), key=lambda kv: ids[kv[0]]):
        sim_to_rep = estimated_jaccard(sigs[mem], np.repeat(sigs[rep : rep + 1], len(mem), axis=0))
        cluster_evals = sorted({e for i in mem for e in evals[i]})
        eval_members = [i for i in mem if evals[i]]
        for i, s in zip(mem, sim_to_rep, strict=True):
            method = "self" if i == rep else "minhash"
            rows.append(
                {
                    "scope": "question",
                    "member_id": ids[i],
                    "representative_id": ids[rep],
                    "similarity": 1.0 if i == rep else float(s),
                    "method": method,
                    "cluster_size": len(mem),
                }
            )
            rep_of[ids[i]] = ids[rep]
            if cluster_evals and not evals[i]:
                # the closest evaluation question of the cluster
                e_sims = estimated_jaccard(
                    sigs[eval_members], np.repeat(sigs[i : i + 1], len(eval_members), axis=0)
                )
                j = eval_members[int(np.argmax(e_sims))]
                rows.append(
                    {
                        "scope": "contamination",
                        "member_id": ids[i],
                        "representative_id": ids[j],
                        "similarity": float(e_sims.max()),
                        "method": "minhash",
                        "cluster_size": len(mem),
                    }
                )
        if not cluster_evals:  # one train-eligible question: counted once, per set it is in
            trained.update(set().union(*(both[i][1] for i in mem)))
        r = items[rep]
        truth = next(
            (items[i]["ground_truth"] for i in [rep, *mem] if items[i]["ground_truth"] is not None),
            None,
        )
        uniq.append(
            {
                "question_id": ids[rep],
                "question": r["question"],
                "ground_truth": truth,
                "answer_type": next(
                    (
                        items[i]["answer_type"]
                        for i in [rep, *mem]
                        if items[i]["answer_type"] is not None
                    ),
                    None,
                )
                or answer_type_of(truth),
                "domain": r["domain"],
                "datasets": sorted({d for i in mem for d in items[i]["datasets"]}),
                "sources": sorted({s for i in mem for s in items[i]["sources"]}),
                "member_ids": sorted(ids[i] for i in mem),
                "n_members": len(mem),
                "n_rows": sum(items[i]["n_rows"] for i in mem),
                "in_eval_set": bool(cluster_evals),
                "contaminated_by": cluster_evals,
                "train_eligible": not cluster_evals,
            }
        )
    counts.update(
        question_rows=sum(r["n_rows"] for r in items),
        questions_distinct=len(items),
        questions_kept=len(uniq),
        questions_near_duplicates=len(items) - len(uniq),
        question_pairs_verified=len(pairs),
        question_signatures_computed=new,
        questions_in_eval_sets=sum(u["in_eval_set"] for u in uniq),
        # evaluation sets whose own questions are in the lake (a pool): only then were
        # near-duplicates checked (recognised items alone are exact copies)
        eval_sets_found=len(
            {e for r in items if r["from_pool"] for e in _pool_sets(r, config.eval_sets)}
            & set(config.eval_sets)
        ),
        questions_contaminated=sum(1 for r in rows if r["scope"] == "contamination"),
        questions_train_eligible=sum(u["train_eligible"] for u in uniq),
        questions_recognised_as_eval=sum(sum(c.values()) for c in seen.values()),
        questions_trained_on_eval_sets=sum(trained.values()),
    )
    warnings.extend(known_eval_warnings(seen, trained, config.eval_sets))
    return rows, uniq, rep_of


TRAJECTORY_ITEMS = """
SELECT record_id, trajectory_id, question_id, source, is_correct, reward, len(validation_flags) = 0 AS clean,
       num_messages, final_answer IS NOT NULL AS has_final, ingested_at,
       list_transform(messages, lambda m: m.role || ': ' || coalesce(m.content, '') || ' ' ||
                      coalesce(array_to_string(list_transform(m.tool_calls, lambda c: c.name || ' ' || c.arguments), ' '), '')) AS parts
FROM valid_trajectories ORDER BY record_id
"""


def trajectory_items(lake: Lake, config: DedupConfig):
    """Trajectory items, their keys, exact representatives, and the texts of the distinct
    contents (``firsts``) whose signatures the near-duplicate pass needs."""
    items = query(lake, TRAJECTORY_ITEMS).to_pylist()
    keys = [
        trajectory_key(
            r["is_correct"],
            r["reward"],
            r["clean"],
            r["num_messages"],
            r["has_final"],
            r["ingested_at"],
            r["record_id"],
        )
        for r in items
    ]
    # exact: same content id
    by_tid: dict[str, int] = {}
    exact_label = np.arange(len(items))
    for i, r in enumerate(items):
        exact_label[i] = by_tid.setdefault(r["trajectory_id"], i)
    exact_rep = pick_representatives(exact_label, keys)
    firsts = sorted({int(x) for x in exact_rep})
    texts = ["\n".join(items[i]["parts"] or [])[: config.max_text_chars] for i in firsts]
    return items, keys, exact_rep, firsts, texts


def dedup_trajectories(
    lake: Lake, config: DedupConfig, counts: dict, rep_of: dict[str, str]
) -> list[dict]:
    items, keys, exact_rep, firsts, texts = trajectory_items(lake, config)
    sigs, new = signatures_for(
        lake, "trajectory", [items[i]["trajectory_id"] for i in firsts], texts, config
    )
    qrep = [rep_of.get(items[i]["question_id"], items[i]["question_id"]) for i in firsts]
    group_ids = {q: k for k, q in enumerate(sorted(set(qrep)))}
    groups = np.array([group_ids[q] for q in qrep], dtype=np.int64)
    pairs, _ = verified(candidate_pairs(sigs, config, groups), sigs, texts, config)
    near_labels = clusters(len(firsts), pairs)
    near_rep = pick_representatives(near_labels, [keys[i] for i in firsts])
    final_rep = {firsts[k]: firsts[int(near_rep[k])] for k in range(len(firsts))}
    pos = {f: k for k, f in enumerate(firsts)}
    size: dict[int, int] = {}
    rep_index = []
    for i in range(len(items)):
        rep = final_rep[int(exact_rep[i])]
        rep_index.append(rep)
        size[rep] = size.get(rep, 0) + 1
    rows = []
    exact_d = near_d = 0
    for i, r in enumerate(items):
        rep = rep_index[i]
        if i == rep:
            method, sim = "self", 1.0
        elif items[i]["trajectory_id"] == items[rep]["trajectory_id"]:
            method, sim = "exact", 1.0
            exact_d += 1
        else:
            a, b = pos[int(exact_rep[i])], pos[rep]
            method, sim = "minhash", float(estimated_jaccard(sigs[a : a + 1], sigs[b : b + 1])[0])
            near_d += 1
        rows.append(
            {
                "scope": "trajectory",
                "member_id": r["record_id"],
                "representative_id": items[rep]["record_id"],
                "similarity": sim,
                "method": method,
                "cluster_size": size[rep],
            }
        )
    counts.update(
        trajectory_rows=len(items),
        trajectories_kept=len(items) - exact_d - near_d,
        trajectory_exact_duplicates=exact_d,
        trajectory_near_duplicates=near_d,
        trajectory_signatures_computed=new,
    )
    return rows


def dedup(lake: Lake, config: DedupConfig | None = None) -> DedupResult:
    """Run every scope and rewrite ``dedup_clusters`` and ``unique_questions``. The lake's
    registered evaluation sets (``flow ingest --eval-set``) count beside ``config.eval_sets``."""
    config = config or DedupConfig()
    config = replace(config, eval_sets=tuple(dict.fromkeys(config.eval_sets + registered(lake))))
    counts: dict[str, int] = {}
    warnings: list[str] = []
    rows, uniq, rep_of = dedup_questions(lake, config, counts, warnings)
    if config.trajectories:
        rows += dedup_trajectories(lake, config, counts, rep_of)
    lake.write_part(
        "dedup_clusters",
        "current",
        pa.Table.from_pylist(rows, schema=lake_schema("dedup_clusters")),
    )
    lake.write_part(
        "unique_questions",
        "current",
        pa.Table.from_pylist(uniq, schema=lake_schema("unique_questions")),
    )
    # a cluster of one question is no duplicate: only clusters with copies are "largest"
    largest = sorted(
        (u for u in uniq if u["n_members"] > 1), key=lambda u: (-u["n_members"], u["question_id"])
    )[:10]
    per_source = query(
        lake,
        """SELECT t.source, count(*) AS trajectories, count(*) FILTER (WHERE c.method = 'exact') AS exact_duplicates,
                  count(*) FILTER (WHERE c.method = 'minhash') AS near_duplicates
           FROM dedup_clusters c JOIN trajectories t ON t.record_id = c.member_id
           WHERE c.scope = 'trajectory' GROUP BY 1 ORDER BY 1""",
    ).to_pylist()
    b, r = band_params(config.threshold, config.num_perm, config.weights)
    params = {
        "threshold": config.threshold,
        "num_perm": config.num_perm,
        "bands": b,
        "rows": r,
        "backend": config.resolved_backend(),
        "lsh": config.lsh,
        "ngram": config.ngram,
        "mode": config.mode,
    }
    return DedupResult(
        counts,
        [
            {k: u[k] for k in ("question_id", "n_members", "sources", "datasets")}
            | {"question": (u["question"] or "")[:80]}
            for u in largest
        ],
        per_source,
        params,
        warnings
        + ([] if counts.get("eval_sets_found") else [no_eval_set_warning(config.eval_sets)]),
    )


def lake_schema(table: str) -> pa.Schema:
    from schemas import TABLES

    return TABLES[table]
