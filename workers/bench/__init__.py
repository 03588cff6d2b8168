"""Benches: commands that measure the system against a baseline in the same run (`fittest bench …`)."""
