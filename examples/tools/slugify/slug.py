"""slugify: a URL slug from a title.

Fails with bad input (ValueError / TypeError) when the title is not a string or has no letters
or digits, since an empty slug would silently collide with every other empty one.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def run(input: dict[str, Any]) -> dict[str, str]:
    title = input.get("title")
    if not isinstance(title, str):
        raise TypeError(f"'title' must be a string, got {type(title).__name__}")
    max_length = int(input.get("max_length", 80))
    if max_length < 1:
        raise ValueError("'max_length' must be at least 1")
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    slug = NOT_ALNUM.sub("-", ascii_title.lower()).strip("-")
    if not slug:
        raise ValueError(f"title {title!r} has no letters or digits to make a slug of")
    if len(slug) > max_length:
        cut = slug[: max_length + 1]
        slug = cut.rsplit("-", 1)[0] if "-" in cut else slug[:max_length]
    return {"slug": slug}
