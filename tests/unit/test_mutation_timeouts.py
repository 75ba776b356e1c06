"""make mutation's guard on mutmut's timeouts (scripts/mutation.py): mutmut signals a mutant's
pid when its time is up even after the mutant ended, and by then the pid may be another
process's (a pytest worker was ended that way mid-test). Only the process registered under a
pid, once its own time is up, is signalled."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """mutmut's timeout module with the guard on (undone after the test)."""
    import mutmut.__main__ as main
    from mutmut.threading import timeout

    monkeypatch.setattr(timeout, "os", timeout.os)
    monkeypatch.setattr(main, "register_timeout", main.register_timeout)
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from mutation import _signal_own_children_only

    _signal_own_children_only()
    yield main, timeout
    with timeout._heap_lock:  # no entry of this test's is left for the unguarded thread
        timeout._timeout_heap.clear()


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"])  # noqa: S607 (coreutils' sleep)


def test_a_process_registered_under_no_timeout_is_never_signalled(guarded):
    _, timeout = guarded
    # given a process that is no mutant (what a reused pid points at)
    bystander = sleeper()
    try:
        # when mutmut's timeout thread signals its pid
        with pytest.raises(ProcessLookupError):
            timeout.os.kill(bystander.pid, signal.SIGXCPU)
        # then it lives on
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_mutant_is_spared_before_its_time_and_stopped_after(guarded):
    main, timeout = guarded
    # given a mutant registered with a long timeout: an earlier entry under its pid firing now
    mutant = sleeper()
    try:
        main.register_timeout(mutant.pid, 3600)
        with pytest.raises(ProcessLookupError):
            timeout.os.kill(mutant.pid, signal.SIGXCPU)
        assert mutant.poll() is None
        # when it is registered again with no time left (its own entry)
        main.register_timeout(mutant.pid, 0)
        # then mutmut's thread stops it with SIGXCPU, as mutmut counts a timeout
        assert mutant.wait(timeout=10) == -signal.SIGXCPU
    finally:
        if mutant.poll() is None:
            mutant.kill()
            mutant.wait()
