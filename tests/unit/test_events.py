"""The memory worker's buffered task events survive a flush that runs while threads append."""

from __future__ import annotations

from typing import Any

from kombu import Connection

from workers.app import app
from workers.events import BatchKeepingEventDispatcher


def test_an_event_appended_while_a_batch_is_published_is_published_next() -> None:
    """QA: a third of the memory worker's task-succeeded events never reached Flower (celery#10434)."""
    dispatcher = app.events.Dispatcher(Connection("memory://"), hostname="memory@test", enabled=True,
                                       buffer_group=["task"], buffer_limit=100)
    assert isinstance(dispatcher, BatchKeepingEventDispatcher)  # what the workers are given
    published: list[list[str]] = []

    def publish(events: Any, producer: Any, routing_key: str, **kwargs: Any) -> None:
        published.append([e["uuid"] for e in events])
        if len(published) == 1:  # another pool thread finishes a task during the socket write
            dispatcher.send("task-succeeded", uuid="during")

    dispatcher._publish = publish
    dispatcher.send("task-succeeded", uuid="before")
    dispatcher.flush()
    dispatcher.flush()
    assert published == [["before"], ["during"]]
