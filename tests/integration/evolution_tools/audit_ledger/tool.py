from pathlib import Path


def run(value):
    key = value["key"]
    with Path(f"{value['path']}.audit").open("a") as ledger:
        ledger.write(f"{key}\n")
    return {"appended": key}
