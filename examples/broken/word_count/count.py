"""Count words. It reads `text`; its callers have since renamed the key to `content` (renamed keys)."""


def run(value: dict) -> dict:
    text = value["text"]
    if not isinstance(text, str):
        raise TypeError("text must be a string")
    words = text.split()
    return {"words": len(words), "longest": max(words, key=len) if words else ""}
