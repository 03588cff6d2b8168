"""Celery tasks, one module per queue. Importing this package registers every `fittest.*` task."""

from workers.tasks import evolution, execution, feedback, learning, selection  # noqa: F401
