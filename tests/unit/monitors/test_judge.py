"""app.monitors.judge: a saturated judge is the domain's Unavailable, answered as a 500 the sender may retry."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from app.errors import Unavailable
from app.monitors import judge
from app.monitors.state.runtime import MonitorRuntime
from app.web.errors import api_error_for


def test_a_judge_slot_not_freed_in_time_is_unavailable_with_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge, "POOL_BUSY_PATIENCE_SECONDS", 0.01)
    # JudgeSlot reads only the runtime's judge_slots: one slot, held by the first writer.
    runtime: MonitorRuntime = SimpleNamespace(judge_slots=threading.BoundedSemaphore(1))  # type: ignore[assignment]
    with judge.JudgeSlot(runtime), pytest.raises(Unavailable) as refused, judge.JudgeSlot(runtime):
        pass
    assert not refused.value.caller_at_fault and refused.value.retry_after == 5
    answer = api_error_for(refused.value)
    assert (answer.status, answer.code, answer.headers) == (500, "INTERNAL_ERROR", {"Retry-After": "5"})
    with judge.JudgeSlot(runtime):  # the slot held above was given back
        pass
