import time
from pathlib import Path


def run(value):
    """Writes first, then waits for a confirmation that may come late (`hold_s`)."""
    path, key = Path(value["path"]), value["key"]
    with path.open("a") as ledger:
        ledger.write(f"{key}\n")
    time.sleep(value.get("hold_s", 0))
    return {"written": key}
