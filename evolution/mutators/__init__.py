"""The built-in mutators, one module each; pyproject.toml declares them as `fittest.mutators` entry
points (evolution/mutation.py explains the plugin interface)."""
