"""What makes two sends the same job under one call id (workers/state/call_ids.py)."""

from __future__ import annotations

from workers.state.call_ids import job_digest


def test_a_job_is_what_is_asked_whatever_its_id_and_the_order_of_its_arguments() -> None:
    one = job_digest("resilient_tool_call", {"scenario": "sort", "input": {"n": [2, 1]}, "call_id": "a"})
    assert one == job_digest("resilient_tool_call", {"call_id": "b", "input": {"n": [2, 1]}, "scenario": "sort"})
    assert one != job_digest("resilient_tool_call", {"scenario": "sort", "input": {"n": [1, 2]}, "call_id": "a"})
    assert one != job_digest("call_tool", {"scenario": "sort", "input": {"n": [2, 1]}, "call_id": "a"})


def test_a_claim_an_earlier_release_wrote_is_the_same_job_to_this_one(redis_url: str, run_prefix: str) -> None:
    """QA 60c F2: after an upgrade past the digest's change (defaults counted as left out), every
    call an older client sent, or had queued, was refused as another job under its own id, never
    answered, and sent again by the rescue sweep every 45 s."""
    import hashlib
    import json

    import redis

    from workers.state.call_ids import CallIds, earlier_job_digest

    sent: dict[str, object] = {"scenario": "count the words", "input": {"text": "a b"}, "namespace": None, "tags": [], "context": {},
            "max_attempts": 5, "call_id": "job-1"}  # as the older CLI sent it, every default written out
    as_it_hashed = hashlib.sha256(json.dumps({"task": "resilient_tool_call", **{k: v for k, v in sent.items() if k != "call_id"}},
                                             sort_keys=True, default=str).encode()).hexdigest()  # that release's job_digest
    client = redis.Redis.from_url(redis_url)
    try:
        ids = CallIds(client, f"{run_prefix}:")
        assert ids.claim("job-1", as_it_hashed) == ("new", False)  # the older client's claim
        this = job_digest("resilient_tool_call", sent)
        assert this != as_it_hashed
        assert ids.claim("job-1", this, also=(earlier_job_digest("resilient_tool_call", sent),))[0] == "again"
        other = {**sent, "input": {"text": "c d"}}
        assert ids.claim("job-1", job_digest("resilient_tool_call", other),
                         also=(earlier_job_digest("resilient_tool_call", other),))[0] == "another"
    finally:
        client.close()
