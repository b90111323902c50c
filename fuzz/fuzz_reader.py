"""atheris (libFuzzer) coverage-guided target for the MMV reader and catalogue.

Each input is written to a file on tmpfs and checked by :func:`fuzz.target.check_bytes`:
any exception other than an MmvError subclass, or a broken oracle rule (:class:`Finding`),
is a finding.  By default libFuzzer stops at the first one and saves the input
(``-artifact_prefix``).  With ``FUZZ_KEEP_GOING=DIR`` the target records each distinct
finding instead (signature: exception type and the innermost pmda_mmv/fuzz frame) as
``DIR/finding-<signature hash>`` plus a ``.txt`` traceback, and keeps fuzzing; atheris'
``-fork`` mode does not work here.  See fuzz/README.md for how it is run.

    .venv/bin/python fuzz/fuzz_reader.py [libFuzzer options] CORPUS_DIR [SEED_DIR...]
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import traceback

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports(include=["pmda_mmv", "fuzz"]):
    from fuzz.target import check_bytes

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
PATH = os.path.join(tempfile.mkdtemp(prefix="fuzz-mmv-", dir=SHM), "fuzzed")
KEEP_GOING = os.environ.get("FUZZ_KEEP_GOING", "")
seen: set[str] = set()


def signature(e: BaseException) -> str:
    frames = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if "/pmda_mmv/" in f.filename or "/fuzz/" in f.filename
    ]
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
    return f"{type(e).__name__}@{where}"


def record(data: bytes, e: BaseException) -> None:
    sig = signature(e)
    if sig in seen:
        return
    seen.add(sig)
    name = os.path.join(KEEP_GOING, "finding-" + hashlib.sha1(sig.encode()).hexdigest()[:12])
    with open(name, "wb") as f:
        f.write(data)
    with open(name + ".txt", "w") as f:
        f.write(f"{sig}\n{''.join(traceback.format_exception(e))}")
    print(f"FINDING {sig} -> {name}", file=sys.stderr, flush=True)


def test_one_input(data: bytes) -> None:
    if not KEEP_GOING:
        check_bytes(data, PATH)
        return
    try:
        check_bytes(data, PATH)
    except Exception as e:
        record(data, e)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
