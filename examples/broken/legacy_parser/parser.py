"""A parser whose grammar file is gone: every call crashes. No mutator can fix this (unfixable)."""


def run(value: dict) -> dict:
    raise RuntimeError("grammar file legacy.grammar is missing; the parser cannot start")
