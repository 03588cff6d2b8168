"""Round a number. `digits` has no default in the code, though most callers leave it out (missing defaults)."""


def run(value: dict) -> dict:
    number, digits = value["value"], value["digits"]
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        raise TypeError("value must be a number")
    return {"value": round(float(number), int(digits))}
