"""Add two numbers. Callers sending numbers as strings ("2") are refused (wrong input types)."""


def run(value: dict) -> dict:
    a, b = value["a"], value["b"]
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    return {"sum": a + b}
