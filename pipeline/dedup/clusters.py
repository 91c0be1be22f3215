"""Union-find over verified pairs, and the representative policy.

Which member represents a cluster is decided by a sort key, never by arrival order:

* questions: has a ground truth, comes from a question pool (not only from attempts or
  trajectories), appears in more sources, earliest ingested, then the smallest id;
* trajectories: correct, higher reward, passed validation without flags, more messages (more
  complete), has a final answer, earliest ingested, then the smallest record id.
"""

from __future__ import annotations

import numpy as np


def clusters(n: int, pairs: np.ndarray) -> np.ndarray:
    """Cluster label (smallest member index) of each of ``n`` items given linked pairs:
    connected components (scipy, in C; equal to union-find, tested), labelled by their smallest
    member."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if not len(pairs):
        return np.arange(n)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix(
        (np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n)
    )
    _, comp = connected_components(graph, directed=False)
    smallest = np.full(comp.max() + 1, n, dtype=np.int64)
    np.minimum.at(smallest, comp, np.arange(n))
    return smallest[comp]


def pick_representatives(labels: np.ndarray, sort_keys: list[tuple]) -> np.ndarray:
    """Index of each item's cluster representative: the member with the smallest sort key."""
    best: dict[int, int] = {}
    for i, lab in enumerate(labels):
        j = best.get(int(lab))
        if j is None or sort_keys[i] < sort_keys[j]:
            best[int(lab)] = i
    return np.array([best[int(lab)] for lab in labels], dtype=np.int64)


def question_key(has_gt: bool, from_pool: bool, n_sources: int, first_ingested, qid: str) -> tuple:
    return (not has_gt, not from_pool, -n_sources, first_ingested, qid)


def trajectory_key(
    is_correct,
    reward,
    passed_clean: bool,
    num_messages: int,
    has_final: bool,
    ingested_at,
    record_id: str,
) -> tuple:
    return (
        is_correct is not True,
        -(reward if reward is not None else float("-inf")),
        not passed_clean,
        -num_messages,
        not has_final,
        ingested_at,
        record_id,
    )
