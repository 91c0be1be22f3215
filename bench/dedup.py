"""Dedup throughput and quality on >= 100k documents: real question texts from ../shared/data
plus generated variants with planted near-duplicates.

    python bench/dedup.py [--variants 7] [--naive 2000]

Same run, same documents: the project end to end (signatures, partitioned LSH, verification,
union-find) with each signature backend; a naive per-document datasketch loop
(``MinHash.update`` per shingle, on a subset); rensa used directly (``RMinHash.update`` with the
shingle strings of each document). Precision and recall of the verified pairs are measured
against exact Jaccard of the shingle sets.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import time
from pathlib import Path

import numpy as np

from pipeline.dedup import DedupConfig
from pipeline.dedup.clusters import clusters
from pipeline.dedup.minhash import backend, exact_jaccard
from pipeline.dedup.shingles import shingles
from pipeline.dedup.stage import candidate_pairs, verified

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def real_texts() -> list[str]:
    out = []
    for path in sorted(glob.glob(str(SHARED / "questions/*/*.jsonl"))):
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            out.append(r.get("problem") or r.get("question"))
    for line in (
        (SHARED / "fireact/data/finetune/gpt_format/multitask_multimethod.jsonl")
        .read_text()
        .splitlines()
    ):
        msgs = json.loads(line)["messages"]
        out.append(" ".join(m["content"] for m in msgs[:3]))
    seen, uniq = set(), []
    for t in out:
        if t and t not in seen and len(t.split()) >= 12:
            seen.add(t)
            uniq.append(t)
    return uniq


def variant(text: str, rng: random.Random, kind: int) -> str:
    words = text.split()
    if kind == 0:  # whitespace and punctuation only
        return "  ".join(words).replace(",", " ,").replace(".", " .")
    if kind == 1:  # one word appended
        return text + " " + rng.choice(["please", "thanks", "now", "briefly"])
    rate = {2: 0.02, 3: 0.05, 4: 0.08, 5: 0.10, 6: 0.15, 7: 0.25}.get(kind, 0.5)
    return " ".join(
        w if rng.random() > rate else rng.choice(["foo", "bar", "baz", "qux", "zap"]) for w in words
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=9)
    ap.add_argument(
        "--naive", type=int, default=2000, help="documents for the naive loop (it is slow)"
    )
    args = ap.parse_args()
    rng = random.Random(0)
    base = real_texts()
    docs, group = [], []
    for g, t in enumerate(base):
        docs.append(t)
        group.append(g)
        for k in range(args.variants):
            docs.append(variant(t, rng, k))
            group.append(g)
    group = np.array(group)
    n = len(docs)
    print(
        f"{n} documents ({len(base)} real texts + {n - len(base)} planted variants), mean {np.mean([len(d) for d in docs]):.0f} chars"
    )

    # naive datasketch loop on a subset
    from datasketch import MinHash

    sub = docs[: args.naive]
    t0 = time.perf_counter()
    for d in sub:
        m = MinHash(num_perm=128)
        for s in shingles(d):
            m.update(s.encode("utf-8"))
    naive = len(sub) / (time.perf_counter() - t0)
    # rensa directly, with the same shingle strings
    from rensa import RMinHash

    t0 = time.perf_counter()
    for d in docs:
        m = RMinHash(num_perm=128, seed=1)
        m.update(shingles(d))
        m.digest()
    rensa_direct = n / (time.perf_counter() - t0)

    results = {}
    for name in ("datasketch", "rensa"):
        config = DedupConfig(backend=name)
        t0 = time.perf_counter()
        sigs = backend(name, 128).signatures(docs)
        t_sig = time.perf_counter() - t0
        pairs = candidate_pairs(sigs, config)
        ok, _ = verified(pairs, sigs, docs, config)
        clusters(n, ok)
        t_all = time.perf_counter() - t0
        results[name] = (t_sig, t_all, pairs, ok)
        print(
            f"project [{name:10s}] signatures {n / t_sig:>9.0f} docs/s; end to end (LSH, verify, union-find) {n / t_all:>9.0f} docs/s; candidates {len(pairs)}, verified {len(ok)}"
        )
    print(f"naive datasketch loop     {naive:>9.0f} docs/s (on {len(sub)} docs)")
    print(
        f"rensa directly            {rensa_direct:>9.0f} docs/s (signatures only, shingle strings)"
    )
    for name, (t_sig, t_all, _, _) in results.items():
        print(
            f"ratio project[{name}] signatures / naive datasketch: {n / t_sig / naive:.1f}x; / rensa directly: {n / t_sig / rensa_direct:.2f}x"
        )
        print(
            f"ratio project[{name}] end-to-end / naive datasketch: {n / t_all / naive:.1f}x; / rensa directly: {n / t_all / rensa_direct:.2f}x"
        )

    # quality: exact Jaccard truth within planted groups; predicted pairs checked exactly
    truth = set()
    for g in range(len(base)):
        idx = np.nonzero(group == g)[0]
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                if exact_jaccard(docs[idx[a]], docs[idx[b]]) >= 0.8:
                    truth.add((int(idx[a]), int(idx[b])))
    for name, (_, _, _, ok) in results.items():
        pred = {(int(a), int(b)) for a, b in ok}
        tp_in = len(pred & truth)
        extra = pred - truth
        tp_extra = sum(
            exact_jaccard(docs[a], docs[b]) >= 0.8 for a, b in extra
        )  # real near-dups across groups
        precision = (tp_in + tp_extra) / max(1, len(pred))
        recall = tp_in / max(1, len(truth))
        print(
            f"quality [{name:10s}] planted true pairs {len(truth)}, predicted {len(pred)}: precision {precision:.3f}, recall {recall:.3f}"
        )


if __name__ == "__main__":
    main()
