"""The Celery app: five queues, JSON only, late acks, routes by task name.

Every process (worker role, beat, CLI, client) builds the app from the same Settings, so they all
agree on broker, backend and routes.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_ready
from kombu import Queue

from workers import group_stop  # noqa: F401 - a SIGTERM to a worker's group stops it warm (its signal handlers)
from workers.events import use_batch_keeping_dispatcher
from workers.logging import WORKER_READY
from workers.logging import install as install_logging
from workers.publishing import PUBLISH_RETRY_POLICY, ReconnectSafeAMQP
from workers.redis_connection import without_credentials
from workers.settings import Settings, get_settings, misspelled_variables
from workers.state.call_ids import RESULT_TTL_S

QUEUES = ("selection", "execution", "feedback", "evolution", "learning")
# The worker consuming it owns the embedder and the embedded store (the Procfile's memory role):
# what health asks of them, and the one worker that may open the store (workers/routing.py)
MEMORY_QUEUE = "selection"

TASK_ROUTES: dict[str, dict[str, str]] = {
    "fittest.resilient_tool_call": {"queue": "selection"},
    "fittest.call_tool": {"queue": "selection"},
    "fittest.explain": {"queue": "selection"},
    "fittest.execute": {"queue": "execution"},
    "fittest.mark_failure": {"queue": "feedback"},
    "fittest.record_outcome": {"queue": "feedback"},
    "fittest.record_evolution": {"queue": "feedback"},
    "fittest.record_feedback": {"queue": "feedback"},
    "fittest.feedback_report": {"queue": "feedback"},
    "fittest.forget": {"queue": "feedback"},
    "fittest.prepare_evolution": {"queue": "selection"},
    "fittest.evolve": {"queue": "evolution"},
    "fittest.learn": {"queue": "learning"},
    "fittest.retrain_weights": {"queue": "learning"},
    "fittest.prune_history": {"queue": "learning"},
    "fittest.recommend": {"queue": "learning"},
}

# Redis emulates priorities with one list per step; kombu pops lower numbers first.
PRIORITY_HIGH = 0
PRIORITY_NORMAL = 5
PRIORITY_LOW = 9
PRIORITY_STEPS = list(range(10))  # one list per step: "queue", "queue:1", ... "queue:9"

# How often each worker looks for messages a crashed worker took and never acknowledged (they come
# back once the visibility timeout has passed); kombu's own default sweep runs every 100 s.
RESTORE_SWEEP_S = 5
# A broker connection that is dead or half-open is dropped within seconds, not minutes.
BROKER_SOCKET_TIMEOUT_S = 15.0
BROKER_HEALTH_CHECK_S = 10
# How long beat may sleep between ticks. Each tick extends beat's lock, and a beat that died leaves
# the lock until it expires (redbeat's default, 5 x Celery's 300 s, kept the next beat idle for
# 25 min), so the lock's timeout follows this interval: a restarted beat takes over within a minute.
BEAT_MAX_INTERVAL_S = 10
BEAT_LOCK_TIMEOUT_S = 5 * BEAT_MAX_INTERVAL_S
# How long beat retries a Redis call (redbeat's own retry) before it gives up and `fittest up`
# restarts it: about as long as the workers wait for a Redis restart.
BEAT_REDIS_RETRY_S = 60
RETRAIN_ENTRY = "retrain-weights"  # the beat's schedule entry of fittest.retrain_weights


def make_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    # Every task's message sent to another queue is handed on to its own (workers/routing.py)
    app = Celery("fittest", include=["workers.tasks", "workers.health"], amqp=ReconnectSafeAMQP,
                 task_cls="workers.routing:RoutedTask", log="workers.logging:FittestLogging")
    use_batch_keeping_dispatcher(app)  # Flower sees every task event of the thread pool (celery#10434)
    beat_url, beat_credentials = without_credentials(settings.redis_url)
    app.conf.update(
        broker_url=settings.redis_url,
        result_backend=settings.backend_url,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_queues=[Queue(q) for q in QUEUES],
        task_default_queue="selection",
        task_routes=TASK_ROUTES,
        task_default_priority=PRIORITY_NORMAL,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            "unacked_restore_interval": RESTORE_SWEEP_S,
            "unacked_restore_throttle": 1,
            "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
            "socket_connect_timeout": 5.0,
            "socket_keepalive": True,
            "health_check_interval": BROKER_HEALTH_CHECK_S,
            "priority_steps": PRIORITY_STEPS,
            "sep": ":",
            "queue_order_strategy": "priority",
        },
        broker_use_ssl=settings.redis_tls() or None,
        redis_backend_use_ssl=settings.redis_tls(settings.backend_url) or None,
        redbeat_redis_use_ssl=settings.redis_tls() or None,
        # A result stored while Redis restarts is retried for as long as a restart takes. The
        # transport's retry policy covers the write; storing also reads the task's current state
        # first, and without `always_retry` a refused read there made a call whose tool had run
        # end with a ConnectionError as its result (seen once in the Redis-restart test).
        result_backend_transport_options={"retry_policy": {"max_retries": 60, "interval_max": 1, "timeout": 60.0}},
        # A message sent while Redis restarts (an attempt's outcome or failure, the next attempt, a
        # batch's learn message) waits for it, ~40 s at most; Celery's default gave up after 0.6 s,
        # and a worker's task that could not send its message then failed with the call or the
        # outcome in it.
        task_publish_retry_policy=PUBLISH_RETRY_POLICY,
        result_backend_always_retry=True,
        result_backend_max_retries=60,
        result_backend_base_sleep_between_retries_ms=50,
        result_backend_max_sleep_between_retries_ms=1000,
        redis_socket_timeout=BROKER_SOCKET_TIMEOUT_S,
        redis_socket_connect_timeout=5.0,
        redis_retry_on_timeout=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # Running tasks are left to finish when the broker connection drops: their effects are
        # keyed by attempt id, and cancelling them would crash the memory worker's thread pool
        # (it cannot kill a job) and delay every call in flight by a visibility timeout.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # celery's consumer, noting a cold shutdown before it terminates the running tasks (workers/group_stop.py)
        worker_consumer="workers.consumer:ColdNotingConsumer",
        result_expires=RESULT_TTL_S,  # how long a call id names its call (workers/state/call_ids.py)
        worker_send_task_events=True,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        timezone="UTC",
        # Without the credentials, which go in the options: Celery masks a "password" there, not in this URL
        redbeat_redis_url=beat_url,
        redbeat_key_prefix=f"{settings.key_prefix}redbeat:",
        # Which stack's state the workers keep, as they answer `inspect conf` (a name celery does not
        # mask as a secret): `fittest up` refuses to start a stack beside another's on one database.
        fittest_stack_prefix=settings.key_prefix,
        # The beat runs workers.beat.Scheduler (Procfile), which restores what a Redis restart lost.
        beat_max_loop_interval=BEAT_MAX_INTERVAL_S,
        redbeat_lock_timeout=BEAT_LOCK_TIMEOUT_S,
        redbeat_redis_options={"retry_period": BEAT_REDIS_RETRY_S, "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
                               "socket_connect_timeout": 5.0, "health_check_interval": BROKER_HEALTH_CHECK_S,
                               **beat_credentials},
        beat_schedule={  # sent to the queue TASK_ROUTES names, as every other message
            RETRAIN_ENTRY: {
                "task": "fittest.retrain_weights",
                "schedule": settings.retrain_interval_s,
            },
            "prune-history": {
                "task": "fittest.prune_history",
                "schedule": settings.retrain_interval_s,
            },
        },
    )
    return app


install_logging()
app = make_app()


@worker_ready.connect
def _quiet_reconnect_warning(**_: Any) -> None:
    """Celery warns at every broker reconnect that `worker_cancel_long_running_tasks_on_connection_loss`
    will default to True in Celery 6; it is set to False on purpose, and the warning, many lines in
    each worker's log, said nothing (QA 50e). Installed once the worker's logging set every celery
    warning to "always"."""
    warnings.filterwarnings("ignore", message=r"\s*In Celery 5.1 we introduced an optional breaking change")


@worker_ready.connect
def say_ready(sender: Any = None, **_: Any) -> None:
    """One line once the worker consumes its queues: `fittest up` counts an end of the role after it
    as a worker that had started, not a failed start (workers/procfile.py)."""
    logging.getLogger("fittest.worker").info("%s ready", getattr(sender, "hostname", "worker"),
                                             extra={"event": WORKER_READY})


@worker_ready.connect
@beat_init.connect
def warn_of_misspelled_variables(**_: Any) -> None:
    """A worker or the beat says which FITTEST_ variables it ignores for a typo, as the CLI does;
    once its logging is set up, so that the line is JSON as the rest (QA recheck: at worker_init it
    was a text line)."""
    for warning in misspelled_variables():
        logging.getLogger("fittest.settings").warning(warning, extra={"event": "setting_misspelled"})
    if (risk := get_settings().short_visibility()) is not None:  # as `fittest up` says it (QA 57a L9)
        logging.getLogger("fittest.settings").warning(risk, extra={"event": "visibility_short"})
