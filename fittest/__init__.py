"""fittest for the services that call it: `from fittest.client import FittestClient`.

Workers, CLI and benches live in the `workers` package; this one holds only what a calling
service needs, so its import stays light.
"""
