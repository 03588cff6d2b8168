"""The runtime: Celery app and tasks, settings, Redis and Qdrant adapters, embedder, runners, CLI."""
