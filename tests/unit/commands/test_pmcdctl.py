"""Running PCP's scripts (pmda_mmv.commands.pmcdctl): a script stopped by a signal that
stops install takes every process it started with it, before anything is put back."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType

import pytest

from pmda_mmv.commands import pmcdctl


class Stopped(Exception):
    """Raised by the test's alarm, as undo.Interrupted is by SIGTERM during install."""


def stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def test_a_stopped_script_leaves_no_subshell_running(tmp_path: Path) -> None:
    """Found in the trixie run: PCP's Install, stopped midway, printed "./pmdammv: not
    found" after the rollback had put the stock files back: a subshell of the script
    survived its parent's SIGKILL and went on.  Here a subshell writes a file a second
    after the script is stopped; nothing may write it."""
    late = tmp_path / "late"
    script = f"(sleep 1; touch '{late}') & wait"
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(Stopped):
            pmcdctl.run(["sh", "-c", script], tmp_path)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    time.sleep(1.5)
    assert not late.exists()


def test_a_signal_held_while_the_script_starts_still_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in CI's sid run: SIGTERM came while the script was being started (the stopping
    signals held), so it was raised as they were let through again, before the script was
    waited for; nothing stopped ./Install, which went on after the rollback and printed
    "./Install: 33: ./pmdammv: not found".  Here SIGTERM is sent as the script has just
    started; the script writes a file a second later; nothing may write it."""
    late = tmp_path / "late"
    started = pmcdctl.subprocess.Popen

    def start_then_signal(*args: object, **kwargs: object) -> object:
        proc = started(*args, **kwargs)  # type: ignore[call-overload]
        # held: delivered once let through.  To this thread: the signals are held in it
        # (pthread_sigmask), as in pmda-mmv install, which has no other thread; a signal to
        # the process would go to another thread here (an xdist worker has execnet's)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
        return proc

    monkeypatch.setattr(pmcdctl.subprocess, "Popen", start_then_signal)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stopped):
            pmcdctl.run(["sh", "-c", f"sleep 1; touch '{late}'"], tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    time.sleep(1.5)
    assert not late.exists()
