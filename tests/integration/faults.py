"""Faults struck into a handler's collaborators mid-turn, as a crash or a dying invocation
would strike them on Lambda; the tests then let the queue redeliver and check that nothing is
lost or doubled."""

from __future__ import annotations

from typing import Any

import pytest


class Crash(Exception):
    """The record fails: Powertools reports it (and the rest of the person's group) failed."""


class Died(BaseException):
    """The invocation dies (a timeout, out of memory): no record is deleted, all come back."""


def crash_after(
    obj: Any,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    nth: int = 1,
    fault: type[BaseException] = Crash,
) -> None:
    """The `nth` call of `obj.name` from now on completes, then `fault` is raised (once)."""
    original = getattr(obj, name)
    calls = {"n": 0}

    def crashing(*args, **kwargs):
        result = original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == nth:
            monkeypatch.setattr(obj, name, original)
            raise fault(f"after {name}")
        return result

    monkeypatch.setattr(obj, name, crashing)


def crash_before(
    obj: Any, name: str, monkeypatch: pytest.MonkeyPatch, fault: BaseException, *, nth: int = 1
) -> None:
    """The `nth` call of `obj.name` from now on raises `fault` without running; the calls
    before and after it run."""
    original = getattr(obj, name)
    calls = {"n": 0}

    def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] < nth:
            return original(*args, **kwargs)
        monkeypatch.setattr(obj, name, original)
        raise fault

    monkeypatch.setattr(obj, name, crashing)
