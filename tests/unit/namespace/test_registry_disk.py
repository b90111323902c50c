"""The identity registry on a full filesystem (pmda_mmv.namespace.atomicfile): a save that
cannot be written whole fails and leaves the registry on disk as it was."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmda_mmv.namespace.registry import Registry
from pmda_mmv.namespace.secret import read_secret, write_secret

PAGE = 4096


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 512 KiB of its own (root mounts it: /var, where the registry lives on
    Debian, is shared with the MMV directory any local user writes to), unmounted after."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"cannot mount a tmpfs (root needed): {done.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int = PAGE) -> None:
    """Fill ``mount`` as any local user can fill /var, then free ``leave`` bytes."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * PAGE)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size - leave)


def test_a_registry_save_on_a_full_filesystem_keeps_the_saved_registry(small_fs: Path) -> None:
    """Found by a local user: with one page left, the next save wrote the temporary file
    short (one unchecked os.write), fsynced it and renamed it over the good registry; at
    the next start it was "not a usable registry" and every user's numbers were lost."""
    path = str(small_fs / "mmv-identity.json")
    r = Registry(path)
    r.load()
    for k in range(200):
        r.serve((f"app{k:03d}", 1000), k + 1, k + 1, False, {1: 5000 + k})
    assert r.save()
    saved = os.path.getsize(path)
    assert saved > 2 * PAGE  # more than the page left
    fill(small_fs)  # one page left

    after = Registry(path)  # the agent restarted: its first save writes the file whole
    after.load()
    after.serve(("newcomer", 1000), 300, 300, False, {})
    assert not after.save()
    assert "cannot save: No space left on device" in after.problem
    assert os.path.getsize(path) == saved
    assert sorted(os.listdir(small_fs)) == sorted(
        ["filler", "mmv-identity.json", "mmv-identity.json.key"]
    )  # no temporary file left

    again = Registry(path)
    again.load()
    assert not again.problem, again.problem
    assert len(again.records) == 200
    record = again.get(("app199", 1000))
    assert record is not None and record.cluster == 200


def test_a_secret_that_cannot_be_written_leaves_the_old_one_and_no_temporary_file(
    small_fs: Path,
) -> None:
    path = str(small_fs / "mmv-identity.json.key")
    secret = os.urandom(32)
    write_secret(path, secret)
    fill(small_fs, leave=0)
    with pytest.raises(OSError) as e:
        write_secret(path, os.urandom(32))
    assert e.value.errno == errno.ENOSPC
    assert read_secret(path) == (secret, True)
    assert sorted(os.listdir(small_fs)) == ["filler", "mmv-identity.json.key"]
