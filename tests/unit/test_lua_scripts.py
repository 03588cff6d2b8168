"""Every Redis Lua script is headed as the code's readers expect (its name, KEYS, ARGV, and what it
does atomically or that it only reads) and is loaded by a store by name: none is left unused."""

from __future__ import annotations

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


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_script_is_loaded_by_a_store(script: Path) -> None:
    assert any(f'"{script.stem}"' in store.read_text() for store in STORES), f"{script.name} is loaded by no store"
