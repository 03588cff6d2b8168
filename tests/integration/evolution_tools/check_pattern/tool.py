import re


def run(value):
    return {"ok": re.match(r"^(a+)+$", value["text"]) is not None}
