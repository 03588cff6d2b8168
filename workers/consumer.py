"""The workers' consumer: celery's, noting a cold shutdown before it terminates the running tasks.

Apart from workers/group_stop.py, whose note it writes, so that the commands that import the app
(every CLI command) do not load celery's consumer: only a worker does (`worker_consumer`).
"""

from __future__ import annotations

from celery.worker.consumer import Consumer

from workers.group_stop import note_shutdown


class ColdNotingConsumer(Consumer):
    """celery's consumer, which notes a cold shutdown before it terminates the running tasks: a
    pool process given that terminate within GROUP_WINDOW_S of a group's SIGTERM took it for the
    group's, and its task ran on (celery's `worker_shutting_down` comes after the terminate)."""

    def cancel_active_requests(self) -> None:
        note_shutdown("Cold")
        super().cancel_active_requests()
