"""Write the seed corpus of the reader fuzzer into OUTDIR.

Seeds: the byte builder's valid samples (tests/support/mmvbuild.sample, versions 1 to 3, with and
without labels, NOPREFIX and SENTINEL) and the files of the project's real-writer corpus
(tests/support/writers: libpcp_mmv, pcp.mmv, PCP::MMV, the pcp-testsuite captures) up to
``--max-size`` bytes, so that mutations start from files that pass the header checks.

    .venv/bin/python fuzz/seeds.py OUTDIR [--max-size BYTES]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from pmda_mmv.mmvfile import layout  # noqa: E402
from tests.support import mmvbuild  # noqa: E402
from tests.support.writers.corpus import write_corpus  # noqa: E402


def builder_seeds() -> dict[str, bytes]:
    out = {}
    for version in layout.VERSIONS:
        for labels in (False, True):
            out[f"sample-v{version}-labels{int(labels)}"] = bytes(
                mmvbuild.sample(version, labels).build().data
            )
        b = mmvbuild.sample(version)
        b.flags = layout.FLAG_NOPREFIX | layout.FLAG_SENTINEL
        out[f"sample-v{version}-flags"] = bytes(b.build().data)
    return out


def writer_seeds(max_size: int) -> dict[str, bytes]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(Path(tmp), references=False)
        for path in sorted(Path(tmp).glob("*/mmv/*")):
            if path.is_file() and path.stat().st_size <= max_size:
                out[f"{path.parent.parent.name}-{path.name}"] = path.read_bytes()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir", type=Path)
    p.add_argument("--max-size", type=int, default=65536)
    a = p.parse_args()
    a.outdir.mkdir(parents=True, exist_ok=True)
    seeds = {**builder_seeds(), **writer_seeds(a.max_size)}
    seen = set()
    for name, data in seeds.items():
        digest = hashlib.sha1(data).hexdigest()
        if digest not in seen:
            seen.add(digest)
            (a.outdir / name).write_bytes(data)
    print(f"{len(seen)} seeds in {a.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
