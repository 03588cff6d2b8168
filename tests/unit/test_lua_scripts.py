"""Every Redis Lua script is headed as the code's readers expect (its name, KEYS, ARGV, and what it
does atomically or that it only reads) and is loaded by a store by name: none is left unused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workers.state.base import LUA_DIR

STORES = sorted(Path(LUA_DIR).parent.glob("*.py"))
SCRIPTS = sorted(LUA_DIR.glob("*.lua"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_script_says_its_keys_its_arguments_and_what_it_does_atomically(script: Path) -> None:
    header = [line for line in script.read_text().splitlines() if line.startswith("--")]
    text = "\n".join(header)
    assert header and header[0].startswith(f"-- {script.stem}: "), header[:1]
    assert "KEYS" in text and "ARGV" in text, script.name
    assert "Atomically" in text or "Reads" in text, script.name


def said(kind: str, header: str) -> set[int]:
    """The KEYS or ARGV indexes a header names, one by one (`ARGV[2]`) or as a range (`ARGV[6..11]`)."""
    named: set[int] = set()
    for first, last in re.findall(kind + r"\[(\d+)(?:\.\.(\d+))?\]", header):
        named.update(range(int(first), int(last or first) + 1))
    return named


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_key_and_argument_a_script_reads_is_named_in_its_header(script: Path) -> None:
    """Review: the test above passed a header that names KEYS and ARGV but not each one the code reads."""
    lines = script.read_text().splitlines()
    header = "\n".join(line for line in lines if line.startswith("--"))
    body = "\n".join(line for line in lines if not line.startswith("--"))
    for kind in ("KEYS", "ARGV"):
        read = {int(n) for n in re.findall(kind + r"\[(\d+)\]", body)}
        assert read <= said(kind, header), f"{script.name}: {kind} {sorted(read - said(kind, header))} read, not in its header"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_script_is_loaded_by_a_store(script: Path) -> None:
    assert any(f'"{script.stem}"' in store.read_text() for store in STORES), f"{script.name} is loaded by no store"
