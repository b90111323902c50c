"""What the tests of paths a local user controls (tests/system/test_untrusted_paths.py)
share: opens of one file counted by inotify, a thread swapping a name between an empty file
and a symlink, and a container of user ``nobody`` (a user namespace with a mount namespace
of its own, as an unprivileged user makes one)."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path
from typing import Final

from pmda_mmv.directory.procfs import cgroup_of, container_of

IN_OPEN: Final = 0x20  # inotify(7)
TMP: Final = "/var/lib/pcp/tmp"  # the container's PCP_TMP_DIR, PCP's default


class Opens:
    """The number of times ``path`` (a file, a device node) was opened since this was
    made: inotify's IN_OPEN (an ``O_PATH`` descriptor is no open on Linux >= 6.5)."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify {path}")
        self.seen = 0

    def count(self) -> int:
        """Opens so far (each event a 16-byte record: no name for a watched file)."""
        while True:
            try:
                self.seen += len(os.read(self.fd, 4096)) // 16
            except BlockingIOError:
                return self.seen

    def close(self) -> None:
        os.close(self.fd)


def held(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds a descriptor of ``path``."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            continue
    return False


SWAP: Final = """
import ctypes, os, sys, time
path, target = sys.argv[1:3]
directory, name = os.path.split(path)
empty, link = os.path.join(directory, ".e"), os.path.join(directory, ".l")
libc = ctypes.CDLL(None, use_errno=True)
events = libc.inotify_init1(0)
libc.inotify_add_watch(events, os.fsencode(directory), 0x20)  # IN_OPEN of its entries
def fresh():
    open(empty, "wb").close()
    os.rename(empty, path)
fresh()
while True:
    buf, names = os.read(events, 65536), set()
    while buf:
        size = int.from_bytes(buf[12:16], sys.byteorder)
        names.add(buf[16 : 16 + size].rstrip(b"\\0").decode())
        buf = buf[16 + size :]
    if name in names:  # the agent opened the empty file: the link, before it looks again
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
        os.rename(link, path)
        print("swapped", flush=True)
        time.sleep(0.002)
        fresh()
"""
"""An attacker's loop: ``path`` is a new empty file (not ready) until the agent opens it,
then at once a symlink to ``target`` (before the agent's re-check of the not-ready file
opens the name again; a line ``swapped`` printed), then a new empty file again:
``python3 -c SWAP path target``."""


def swapper(path: str, target: Path) -> list[str]:
    """The command that swaps ``path`` (:data:`SWAP`) until killed."""
    return ["/usr/bin/python3", "-c", SWAP, path, str(target)]


class Container:
    """User ``nobody`` in a user namespace (mapped to root) with a mount namespace of its
    own and a private tmpfs over its ``/var/lib/pcp/tmp`` with ``mmv`` in it; ``script``
    (sh, run inside) plants what a test needs, then it runs ``command`` until stopped.
    The host's root cannot create files in it (its uid is not mapped there)."""

    def __init__(self, script: str, command: str = "sleep 120") -> None:
        inner = f"mount -t tmpfs tmpfs {TMP} && mkdir {TMP}/mmv && {script} && echo ready"
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        cmd += ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c"]
        cmd += [f"{inner} && exec {command}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line != "ready\n":
            self.stop()
            raise AssertionError(f"container: {line!r}")
        ident = container_of(cgroup_of("/proc", self.proc.pid))
        ns = os.stat(f"/proc/{self.proc.pid}/ns/mnt").st_ino
        self.name = f"c{ident[:12]}" if len(ident) == 64 else f"mnt{ns}"

    @property
    def mmv(self) -> Path:
        """The container's mmv directory, as the host's root sees it."""
        return Path(f"/proc/{self.proc.pid}/root{TMP}/mmv")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
