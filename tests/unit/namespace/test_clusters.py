"""The choice of a free cluster (pmda_mmv.namespace.clusters): what a search costs."""

from __future__ import annotations

import pytest

from pmda_mmv.mmvfile import limits
from pmda_mmv.namespace.clusters import Clusters
from pmda_mmv.namespace.registry import Registry

EVERY = set(range(1, limits.MAX_CLUSTER + 1))


def counted(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> list[int]:
    """How many clusters the searches look at (one Registry.cluster_held call each)."""
    looked = [0]
    held = registry.cluster_held

    def cluster_held(cluster: int, key: object = None) -> bool:
        looked[0] += 1
        return held(cluster, key)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "cluster_held", cluster_held)
    return looked


def test_a_scan_asking_for_every_cluster_finds_each_free_one_in_few_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """6,000 pcp.mmv files, file k asking for cluster k: the files of clusters 1-4,095 ask
    for every cluster, the cluster-0 file takes cluster 1 and each file after it is moved
    off its own to the next.  Each search walked on to the last cluster looking for one no
    file asks for: 8.4 million clusters looked at, 5 s of the agent's first scan and of
    `check` (4,095 steps each now)."""
    registry = Registry()
    clusters = Clusters(registry, log=lambda _: None, info=lambda _: None)
    looked = counted(monkeypatch, registry)
    chosen = []
    for _ in range(limits.MAX_CLUSTER):
        c = clusters.free(EVERY)
        assert c is not None
        clusters.take(c, 0)
        chosen.append(c)
    assert chosen == sorted(EVERY)  # the lowest free one each time
    assert clusters.free(EVERY) is None
    assert looked[0] <= 3 * limits.MAX_CLUSTER, looked[0]


def test_the_search_prefers_a_cluster_no_file_asks_for_and_sees_one_freed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = Registry()
    clusters = Clusters(registry, log=lambda _: None, info=lambda _: None)
    asked = EVERY - {10, 20}
    assert clusters.free(asked) == 10
    clusters.take(10, 0)
    assert clusters.free(asked) == 20
    clusters.take(20, 0)
    assert clusters.free(asked) == 1  # none left that no file asks for: the lowest free
    clusters.release(10, [])
    assert clusters.free(asked) == 10  # freed: found again
