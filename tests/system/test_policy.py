"""The directory policy under pmcd (pmda_mmv.directory.policy): each special entry kind
(FIFO, socket, device, subdirectory, symlinks out of the directory, a sparse 1 TB file,
unreadable files) is refused with a reason and never blocks a request; the agent reads as
user pcp; ``--owners`` restricts whose files are served.  Scanner-level cases are in
tests/unit/directory/test_scanner.py; the policy's own rules in
tests/unit/directory/test_policy.py."""

from __future__ import annotations

import os
import pwd
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.mmvbuild import single as one
from tests.support.served import (
    UNKNOWN_NAME,
    Agent,
    Scratch,
    agent_pids,
    start_agent,
)

pytestmark = pytest.mark.pmcd


def fifo(path: Path) -> object:
    os.mkfifo(path)
    return None


def unix_socket(path: Path) -> object:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


def char_device(path: Path) -> object:
    os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    return None


def subdirectory(path: Path) -> object:
    path.mkdir()
    one(cluster=22).write(path / "inner")
    return None


def symlink_out(path: Path) -> object:
    outside = path.parent.parent / "outside"
    one(cluster=22).write(outside)
    path.symlink_to(outside)
    return None


def symlink_to_etc(path: Path) -> object:
    path.symlink_to("/etc/passwd")
    return None


def symlink_to_itself(path: Path) -> object:
    path.symlink_to(path.name)
    return None


def symlink_chain_out(path: Path) -> object:
    hop = path.with_name(f".{path.name}.hop")  # a dot-file: never served itself
    hop.symlink_to("/etc/passwd")
    path.symlink_to(hop.name)
    return hop


def sparse_1tb(path: Path) -> object:
    one(cluster=22).write(path)
    os.truncate(path, 1 << 40)
    return None


def unreadable(path: Path) -> object:
    one(cluster=22).write(path)
    path.chmod(0)
    return None


SPECIAL: dict[str, tuple[Callable[[Path], object], str]] = {
    "fifo": (fifo, "not a regular file (FIFO)"),
    "socket": (unix_socket, "not a regular file (socket)"),
    "chardev": (char_device, "not a regular file (character device)"),
    "subdir": (subdirectory, "not a regular file (directory)"),
    "link_out": (symlink_out, "symlink out of the directory, not followed"),
    "link_etc": (symlink_to_etc, "symlink out of the directory, not followed"),
    "link_self": (symlink_to_itself, "not a regular file (symlink)"),
    "link_chain_out": (symlink_chain_out, "symlink out of the directory, not followed"),
    "sparse_1tb": (sparse_1tb, "file.size at offset 0: size 1099511627776 exceeds"),
    "unreadable": (unreadable, "cannot open: Permission denied"),
}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_entry_refused_without_blocking(agent: Agent, scratch: Scratch, kind: str) -> None:
    make, reason = SPECIAL[kind]
    path = scratch.path(kind)
    keep = make(path)
    try:
        agent.assert_alive()
        agent.assert_explained(path, "refused", reason)
        assert agent.probe(f"mmv.{kind}")[f"mmv.{kind}"].startswith(UNKNOWN_NAME)
        agent.assert_alive()
    finally:
        if isinstance(keep, socket.socket):
            keep.close()
        elif isinstance(keep, Path):
            keep.unlink()


def test_agent_runs_as_pcp_so_mode_000_is_unreadable(agent: Agent) -> None:
    assert psutil.Process(agent.pid).username() == "pcp"


@pytest.fixture(scope="module")
def owners_agent(base: Path) -> Iterator[Agent]:
    """A second pmcd whose agent trusts only files owned by root."""
    a = start_agent(base / "owners", "--owners", "root")
    try:
        yield a
    finally:
        a.pmcd.stop()


def test_owner_policy_under_pmcd(owners_agent: Agent) -> None:
    a = owners_agent
    nobody = pwd.getpwnam("nobody").pw_uid
    one(cluster=23, value=5).write(a.dir / "mine")
    one(cluster=24, value=6).write(a.dir / "theirs")
    os.chown(a.dir / "theirs", nobody, nobody)
    (a.dir / "alias").symlink_to("theirs")  # root's link to the other user's file
    got = a.probe("mmv.mine.v", "mmv.theirs.v", "mmv.alias.v")
    assert got["mmv.mine.v"] == "1 5"
    assert got["mmv.theirs.v"].startswith(UNKNOWN_NAME)
    assert got["mmv.alias.v"].startswith(UNKNOWN_NAME)
    for name in ("theirs", "alias"):
        a.assert_explained(a.dir / name, "refused", f"owner uid {nobody} is not trusted")
    assert agent_pids(a.pmcd) == [a.pid]
