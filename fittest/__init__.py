"""fittest for the services that call it: `from fittest.client import FittestClient`.

Workers, CLI and benches live in the `workers` package; this one holds only what a calling
service needs (the client, its payload and result types and its errors) and knows no service
itself: the transport on Celery and Redis is workers/client.py, and importing the client loads
neither task code nor a state store.
"""
