"""Celery tasks, one module per queue. Importing this package registers every `fittest.*` task."""

from workers.tasks import evolution, execution, feedback, selection  # noqa: F401
