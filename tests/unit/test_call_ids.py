"""What makes two sends the same job under one call id (workers/state/call_ids.py)."""

from __future__ import annotations

from workers.state.call_ids import job_digest


def test_a_job_is_what_is_asked_whatever_its_id_and_the_order_of_its_arguments() -> None:
    one = job_digest("resilient_tool_call", {"scenario": "sort", "input": {"n": [2, 1]}, "call_id": "a"})
    assert one == job_digest("resilient_tool_call", {"call_id": "b", "input": {"n": [2, 1]}, "scenario": "sort"})
    assert one != job_digest("resilient_tool_call", {"scenario": "sort", "input": {"n": [1, 2]}, "call_id": "a"})
    assert one != job_digest("call_tool", {"scenario": "sort", "input": {"n": [2, 1]}, "call_id": "a"})
