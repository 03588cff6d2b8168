"""Versioning, mutators, verification cascade, promotion and rollback rules."""
