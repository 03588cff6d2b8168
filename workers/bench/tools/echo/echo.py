"""The throughput bench's tool: as close to no work as a tool can be."""


def run(payload: dict) -> dict:
    return payload
