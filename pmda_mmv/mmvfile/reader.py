"""Open one MMV file (mmv(5), versions 1 to 3) and read its values.

Nothing in a file is trusted: :func:`~.parse.parse` checks every offset, count, reference
and string before use, and a malformed file raises only :mod:`~.errors`' errors.  A bad
header or TOC refuses the whole file (:class:`~.errors.Refused`); a bad section or entry
is skipped and recorded as a :class:`~.errors.Corrupt` problem while the rest of the file
stays usable, as the C reference accepts files partially.

Values are read with ``pread(2)`` on a descriptor kept open for the life of the
:class:`MmvFile`, never through a memory mapping: a file truncated underneath yields a
short read, reported as :class:`~.errors.Changed`, where a mapping would raise SIGBUS and
kill the agent.  :meth:`MmvFile.snapshot` takes one consistent copy of the values span per
request and re-checks the size and the generation pair first.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Iterable, Iterator
from typing import Final

from pmda_mmv.mmvfile import decode, layout
from pmda_mmv.mmvfile.decode import MISSING, Decoder, Snapshot
from pmda_mmv.mmvfile.errors import Changed, NotReady, Refused
from pmda_mmv.mmvfile.opener import NotRegular, open_regular
from pmda_mmv.mmvfile.parse import parse
from pmda_mmv.mmvfile.parse.header import read_header
from pmda_mmv.mmvfile.parsed import Instance, Label, Metric

DEFAULT_MAX_SIZE: Final = 64 << 20
"""Largest file accepted by default (bytes): 64 MiB, about 2 million values; the largest real
file seen is under 10 MB.  A larger one (a sparse 1 TB file, or a valid file big enough to
stall the agent past pmcd's timeout while it is indexed) is refused; ``--max-size``."""
OUT_OF_DESCRIPTORS: Final = (errno.EMFILE, errno.ENFILE)
"""Errors of open(2) that say nothing of the file: it is not ready (tried again later), not
refused (looked at again only when its stat changes)."""
STRING_GAP: Final = 64 << 10
"""String entries at most this many bytes apart are read in one ``pread`` (a STRING
metric's values are read per snapshot in a few reads, not one per value)."""


class MmvFile:
    """One validated MMV file, open for reading values.

    Build with :meth:`open`; release with :meth:`close` (or use as a context manager).
    Attributes: ``path``, ``name`` (base name), ``size``, ``uid`` (the owner), and what
    :func:`~.parse.parse` found (:class:`~.parse.Parsed`): ``header``, ``toc``,
    ``sections`` (the TOC entries whose sections were accepted), ``indoms`` (serial ->
    :class:`~.parsed.Indom`), ``metrics`` (accepted, in file order), ``labels``,
    ``problems`` (skipped sections and entries), ``base`` and ``span`` (the values span).
    """

    def __init__(
        self, path: str, fd: int, st: os.stat_result, data: bytes, name: str | None = None
    ) -> None:
        self.path = path
        self.name = name or os.path.basename(path)
        self.fd = -1  # owned only once the file validated (open() closes it otherwise)
        self.size = st.st_size
        self.uid = st.st_uid
        parsed = parse(data, path)
        self.header = parsed.header
        self.toc = parsed.toc
        self.sections = parsed.sections
        self.indoms = parsed.indoms
        self.metrics = parsed.metrics
        self.labels = parsed.labels
        self.label_index = parsed.label_index
        self.problems = parsed.problems
        self.base = parsed.base
        self.span = parsed.span
        self.fd = fd

    # -- construction

    @classmethod
    def open(
        cls, path: str, *, max_size: int = DEFAULT_MAX_SIZE, name: str | None = None
    ) -> MmvFile:
        """Open and validate ``path``; ``name`` (default: its base name) names the file in
        the namespace, for a file reached through a symlink.

        Raises :class:`NotReady` (generation 0 or in flux, or no descriptor free to open
        it), :class:`Refused` (not a regular file, unreadable, too small or large, bad
        magic, version, TOC or cluster) or :class:`Changed` (the file changed while it was
        read).  Opened by :func:`~.opener.open_regular`: never blocks on a FIFO, never
        opens a device or follows a symlink in its last component.
        """
        try:
            fd, st = open_regular(path)
        except NotRegular as e:
            raise Refused(path=path, field="file", message=str(e.strerror)) from None
        except OSError as e:
            if e.errno in OUT_OF_DESCRIPTORS:  # the reader's condition, not the file's
                raise NotReady(
                    path=path, field="file", message=f"cannot open: {e.strerror}"
                ) from None
            raise Refused(path=path, field="file", message=f"cannot open: {e.strerror}") from None
        try:
            _check_stat(path, st, max_size)
            read_header(path, _pread_exact(path, fd, layout.HEADER_SIZE, 0), st.st_size)
            data = _pread_exact(path, fd, st.st_size, 0)
            return cls(path, fd, st, data, name)
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        """Release the descriptor; later reads raise :class:`Changed`."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> MmvFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # -- state

    @property
    def status(self) -> str:
        """``ok`` or ``partial`` (some section or entry was skipped)."""
        return "partial" if self.problems else "ok"

    @property
    def value_count(self) -> int:
        """Number of (metric, instance) values the index holds."""
        return sum(m.value_count for m in self.metrics)

    def labels_for(self, kind: int, identity: int, internal: int = -1) -> list[Label]:
        """The accepted labels of one PCP label set, in file order: ``kind`` (one of
        layout.LABEL_*), its cluster, item or indom serial, and for instance labels the
        instance's internal id."""
        key = (kind, identity, internal if kind == layout.LABEL_INSTANCES else -1)
        return self.label_index.get(key, [])

    def check_generation(self) -> None:
        """Re-check size, link count and generation pair; raise :class:`Changed` if the file
        was truncated or grown, unlinked (a writer restarted under the same name) or given a
        new generation since it was loaded."""
        self._live_header()

    def _live_header(self) -> bytes:
        if self.fd < 0:
            raise Changed(path=self.path, field="file", message="closed")
        try:
            st = os.fstat(self.fd)
        except OSError as e:
            raise Changed(
                path=self.path, field="file", message=f"fstat failed: {e.strerror}"
            ) from None
        if st.st_size != self.size:
            raise Changed(
                path=self.path,
                field="file",
                message=f"size changed from {self.size} to {st.st_size}",
            )
        if st.st_nlink == 0:
            raise Changed(path=self.path, field="file", message="unlinked (replaced or removed)")
        head = _pread_exact(self.path, self.fd, layout.HEADER_SIZE, 0)
        g1, g2 = layout.GENERATION.unpack_from(head, layout.GENERATION_OFFSET)
        if g1 != self.header.g1 or g2 != self.header.g2:
            raise Changed(
                path=self.path,
                field="header.generation",
                offset=layout.GENERATION_OFFSET,
                message=f"generation changed from {self.header.g1} to g1={g1} g2={g2}",
            )
        return head

    # -- values

    def snapshot(self) -> Snapshot:
        """Copy the live values span after re-checking size, link count and generation.

        Raises :class:`Changed` when the file was truncated, unlinked, replaced in place or
        given a new generation since it was loaded."""
        flags = layout.HEADER.unpack(self._live_header())[5]
        data = _pread_exact(self.path, self.fd, self.span, self.base) if self.span else b""
        return Snapshot(data, bool(flags & layout.FLAG_SENTINEL), time.time() * 1e6)

    def last_snapshot(self) -> Snapshot | None:
        """The values as last written while the generation is the one loaded: a
        :meth:`snapshot`, else a copy read through the descriptor still open after the file
        was unlinked (a writer restarted under its name) or removed; None when the
        generation changed or the values cannot be read whole."""
        try:
            return self.snapshot()
        except Changed:
            pass
        try:
            head = os.pread(self.fd, layout.HEADER_SIZE, 0)
            g1, g2 = layout.GENERATION.unpack_from(head, layout.GENERATION_OFFSET)
            if (g1, g2) != (self.header.g1, self.header.g2):
                return None
            data = os.pread(self.fd, self.span, self.base) if self.span else b""
        except (OSError, struct.error):
            return None
        return Snapshot(data, False, time.time() * 1e6) if len(data) == self.span else None

    def read_string(self, offset: int) -> str | None:
        """The live string entry at ``offset``: its text, or None when the offset is out of
        bounds or the entry is not NUL-terminated within 256 bytes."""
        if offset < layout.HEADER_SIZE or offset + layout.STRING_SIZE > self.size or self.fd < 0:
            return None
        try:
            raw = os.pread(self.fd, layout.STRING_SIZE, offset)
        except OSError:
            return None
        return _cstring(raw)

    def read_strings(self, snap: Snapshot, offsets: Iterable[int]) -> None:
        """The live string entries at ``offsets`` into ``snap.strings`` (those not there
        yet), as :meth:`read_string` reads each, but in one read per run of entries less
        than :data:`STRING_GAP` apart: never more bytes than the file holds."""
        cache = snap.strings
        todo = sorted(o for o in set(offsets) if o not in cache)
        size, i = self.size, 0
        while i < len(todo):
            start = todo[i]
            if start < layout.HEADER_SIZE or start + layout.STRING_SIZE > size or self.fd < 0:
                cache[start] = None
                i += 1
                continue
            j, end = i + 1, start + layout.STRING_SIZE
            while (
                j < len(todo)
                and todo[j] - end <= STRING_GAP
                and todo[j] + layout.STRING_SIZE <= size
            ):
                end = todo[j] + layout.STRING_SIZE
                j += 1
            try:
                raw = os.pread(self.fd, end - start, start)
            except OSError:
                raw = b""
            for offset in todo[i:j]:
                cache[offset] = _cstring(raw[offset - start : offset - start + layout.STRING_SIZE])
            i = j

    def decoder(self, mtype: int) -> Decoder:
        """A function ``(snapshot, slot) -> value`` for metrics of ``mtype``
        (:func:`~.decode.decoder`; STRING values are read live, :meth:`read_string`)."""
        return decode.decoder(mtype, self.read_string)

    @staticmethod
    def sliced(snap: Snapshot, metric: Metric) -> bool:
        """Whether :meth:`column` reads ``metric`` in one slice (:func:`~.decode.sliced`)."""
        return decode.sliced(snap, metric)

    def column(self, snap: Snapshot, metric: Metric) -> list[object]:
        """The values of ``metric`` in ``snap``, by instance position
        (:func:`~.decode.column`)."""
        return decode.column(snap, metric, self.read_string, self.read_strings)

    def values(
        self, snap: Snapshot | None = None
    ) -> Iterator[tuple[Metric, Instance | None, object]]:
        """Every (metric, instance or None, value) currently held, in file order."""
        snap = snap or self.snapshot()
        for metric in self.metrics:
            insts = self.indoms[metric.indom].instances if metric.indom is not None else [None]
            for pos, value in enumerate(self.column(snap, metric)):
                if value is not MISSING:
                    yield metric, insts[pos], value


def _cstring(raw: bytes) -> str | None:
    """A string entry's text: up to its NUL, None when it has none."""
    end = raw.find(b"\0")
    return None if end < 0 else raw[:end].decode("utf-8", "replace")


def _check_stat(path: str, st: os.stat_result, max_size: int) -> None:
    if st.st_size == 0:  # libpcp_mmv creates the file, then sizes it: retry it
        raise NotReady(path=path, field="file.size", offset=0, message="size 0, not written yet")
    if st.st_size < layout.HEADER_SIZE:
        raise Refused(
            path=path,
            field="file.size",
            offset=0,
            message=f"size {st.st_size} too small, expecting at least {layout.HEADER_SIZE}",
            limit=layout.HEADER_SIZE,
        )
    if st.st_size > max_size:
        raise Refused(
            path=path,
            field="file.size",
            offset=0,
            message=f"size {st.st_size} exceeds {max_size}",
            limit=max_size,
        )


def _pread_exact(path: str, fd: int, length: int, offset: int) -> bytes:
    try:
        data = os.pread(fd, length, offset)
    except OSError as e:
        raise Changed(
            path=path, field="file", offset=offset, message=f"read failed: {e.strerror}"
        ) from None
    if len(data) != length:
        raise Changed(
            path=path,
            field="file",
            offset=offset,
            message=f"short read: {len(data)} of {length} bytes",
        )
    return data
