"""Task events of the memory worker's thread pool, none dropped on their way to Flower.

A worker with an event loop buffers its task events and publishes them in batches. Celery 5.6's
`EventDispatcher.flush` publishes a group's buffer and then empties it, while the pool's threads go
on appending to it: an event appended during the socket write is dropped. QA saw a third of the
memory worker's task-succeeded events lost, and Flower showed finished calls as still received
(celery#10434). Celery 5.7 publishes a copy and removes only what it published (celery#10435), but
celery-batches 0.11 requires celery<5.7, so until it allows that release this backport is used.
"""

from __future__ import annotations

from typing import Any

import celery
from celery.events.dispatcher import EventDispatcher

FIXED_IN = (5, 7)  # the release of celery#10435


class BatchKeepingEventDispatcher(EventDispatcher):
    """Publishes a copy of each group's buffer and removes only the events it published."""

    def flush(self, errors: bool = True, groups: bool = True) -> None:
        super().flush(errors=errors, groups=False)
        if not groups:
            return
        with self.mutex:
            for group, events in self._group_buffer.items():
                if not events:
                    continue
                batch = list(events)  # a copy: `_publish` keeps what it is given when offline
                self._publish(batch, self.producer, f"{group}.multi")
                del events[:len(batch)]  # the pool's threads append only at the end


def use_batch_keeping_dispatcher(app: Any) -> None:
    """Give `app`'s workers the dispatcher above, on a Celery release that drops events."""
    if (celery.VERSION.major, celery.VERSION.minor) < FIXED_IN:
        app.events.dispatcher_cls = BatchKeepingEventDispatcher
