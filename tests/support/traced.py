"""The memory one scan of a directory costs the scanner, the catalogue and the serving model
(python3-pcp's own tables aside), traced by tracemalloc: what the memory-bound tests of the
scanner and of the limits measure."""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from pmda_mmv.agent.serving import Plan, Serving
from pmda_mmv.directory.scanner import Scanner
from pmda_mmv.namespace.catalogue import Catalogue
from pmda_mmv.namespace.family import Families


@dataclass
class Traced:
    """What one traced scan built, and the bytes still traced once it was done."""

    catalogue: Catalogue
    model: Serving
    plan: Plan
    traced: int


def traced_scan(directory: Path, serve_metrics: bool = False) -> Traced:
    """Scan ``directory`` once with no budget and apply the changes to a serving model
    (with ``serve_metrics``, each PMID's table builder made too), under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        catalogue = Catalogue()
        scanner = Scanner(str(directory), catalogue, budget=None)
        model = Serving(catalogue, print, Families(catalogue, ()))
        plan = model.apply(scanner.refresh(True))
        if serve_metrics:
            for cluster, item in plan.pmids:
                model.serve_metric(cluster, item)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return Traced(catalogue, model, plan, traced)
