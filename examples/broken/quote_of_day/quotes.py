"""Quotes from a simulated upstream that refuses two connections out of three."""

import itertools
import threading

QUOTES = {
    "courage": ("Courage is grace under pressure.", "Ernest Hemingway"),
    "patience": ("Patience is bitter, but its fruit is sweet.", "Jean-Jacques Rousseau"),
    "simplicity": ("Simplicity is the ultimate sophistication.", "Leonardo da Vinci"),
    "change": ("The only constant in life is change.", "Heraclitus"),
}
_requests = itertools.count(1)
_lock = threading.Lock()


def _upstream(topic: str) -> tuple[str, str]:
    with _lock:
        n = next(_requests)
    if n % 3:
        raise ConnectionError("quote service refused the connection (simulated flaky upstream)")
    if topic not in QUOTES:
        raise ValueError(f"no quote about {topic!r}")
    return QUOTES[topic]


def run(value: dict) -> dict:
    topic = value["topic"]
    quote, author = _upstream(topic)
    return {"topic": topic, "quote": quote, "author": author}
