"""stages/dedup/components.py: connected components by large-star / small-star
steps over spill files give scipy's components, labelled by their smallest
handle, for random graphs, long paths and any number of node groups."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components as scipy_components

from common.spill import read_bucket
from stages.dedup import components


def _serial(fn, items):
    return [fn(x) for x in items]


@pytest.mark.parametrize("trial", range(12))
def test_components_equal_scipy(tmp_path, trial):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(2, 300))
    nodes = rng.choice(10**12, n, replace=False).astype(np.int64)  # handles, in no particular order
    if trial % 4 == 0:  # a path: the worst case for label propagation
        a, b = np.arange(n - 1), np.arange(1, n)
    else:
        e = int(rng.integers(1, 400))
        a, b = rng.integers(0, n, e), rng.integers(0, n, e)
        a, b = a[a != b], b[a != b]
    groups = int(rng.integers(1, 6))
    edges = tmp_path / "edges" / "part-00000.parquet"
    components.write_edges(nodes[a], nodes[b], groups, edges)
    files, distinct = components.connected_components([edges], tmp_path, groups, _serial)
    labels = pa.concat_tables([read_bucket(files, j, schema=components.LABELS) for j in range(groups)])
    got = {}
    for g, label in zip(labels["g"].to_pylist(), labels["label"].to_pylist()):
        got[g] = min(label, got.get(g, label))  # a centre may be labelled by several tasks
    _, component = scipy_components(coo_matrix((np.ones(len(a)), (a, b)), shape=(n, n)), directed=False)
    used = np.unique(np.r_[a, b])
    want = {}
    for c in np.unique(component[used]):
        members = used[component[used] == c]
        for i in members:
            want[int(nodes[i])] = int(nodes[members].min())
    assert got == want
    assert distinct == len({(min(x, y), max(x, y)) for x, y in zip(nodes[a].tolist(), nodes[b].tolist())})
