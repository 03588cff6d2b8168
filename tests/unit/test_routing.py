"""A message sent to another of fittest's queues is handed on to its task's own, as it came
(workers/routing.py), on kombu's in-memory transport."""

from __future__ import annotations

from celery import Celery

from workers.routing import REDELIVERED_HEADER, hand_on


def test_a_message_handed_on_keeps_its_body_compression_and_headers_and_says_it_was_redelivered() -> None:
    """QA 59f F1: a compressed message was handed on with its body plain and its header saying
    zlib, and could not be decoded; F6: one the broker had given back read as a first delivery."""
    app = Celery("routing-test", broker="memory://")
    with app.connection_for_write() as connection:
        sent = connection.SimpleQueue("execution")
        given = {"scenario": "sort these", "input": {"numbers": list(range(500))}}
        sent.put(given, headers={"id": "call-1", "task": "fittest.resilient_tool_call"}, compression="zlib", serializer="json")
        message = sent.get(timeout=5)
        message.delivery_info["redelivered"] = True  # as kombu marks a message it gave back
        hand_on(app, message, "selection")
        message.ack()
        own = connection.SimpleQueue("selection")
        copy = own.get(timeout=5)
        assert copy.decode() == given  # decodes: compressed again as it came
        assert copy.headers["id"] == "call-1" and copy.headers["task"] == "fittest.resilient_tool_call"
        assert copy.headers[REDELIVERED_HEADER] is True
        copy.ack()
        sent.close()
        own.close()
