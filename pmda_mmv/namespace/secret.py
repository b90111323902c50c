"""The secret under which an indom's number of its own is derived
(:func:`~.indomnumbers.derived_indom`), without PCP: 32 random bytes kept beside the identity
registry in ``<registry>.key``, mode 0600, so that no other local user can predict where a
victim's search for a number starts.  :class:`~.registry.Registry` reads it
at load and writes it with its first save; in memory only, one per process."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Final

from pmda_mmv.namespace.atomicfile import write_atomically

SECRET_BYTES: Final = 32


def read_secret(path: str | None) -> tuple[bytes, bool]:
    """The derived-number secret kept at ``path`` (mode 0600, beside the registry), and
    whether it was read; a fresh random one (to be written: :func:`write_secret`) when
    ``path`` is None, missing, unreadable (``check`` as a user) or not a secret."""
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    secret = bytes.fromhex(os.read(fd, 4 * SECRET_BYTES).decode("ascii").strip())
                    if len(secret) == SECRET_BYTES:
                        return secret, True
            finally:
                os.close(fd)
    return os.urandom(SECRET_BYTES), False


def write_secret(path: str, secret: bytes) -> None:
    """Write ``secret`` to ``path`` readable by the agent's user only, whole or not at all
    (:func:`~.atomicfile.write_atomically`); raises OSError."""
    write_atomically(path, secret.hex().encode("ascii") + b"\n", mode=0o600)
