"""Generated wrapper code: how a mutation that adds behaviour in front of a tool is written down.

Input coercion, retries and caching do not touch the parent's code. The evolved version's folder
holds the parent's files unchanged under `parent/` and one generated module, `name_v1_1_0.py`,
whose constants at the top say exactly what it adds (renamed keys, coerced types, defaults, the
retry policy, the cache size). An operator reads that one file to know what the version does.

- python or http parent → a python tool (`name_v1_1_0:run`) that adapts the input, then calls the
  parent's function (loaded from `parent/`) or POSTs to the parent's URL, with the retry policy
  (tenacity: jittered exponential backoff, a bounded number of attempts and time) and the cache;
- executable parent → an executable (`{python} {tool_dir}/name_v1_1_0.py`) that adapts its stdin
  and runs the parent's argv (again while it exits 69, EX_UNAVAILABLE, with the retry policy),
  with the parent's own stderr and exit status, and its stdout (cached).

Evolved versions run in a fresh subprocess per call (workers/runners/isolated.py), so the cache is
a folder of files, `cache/` beside the module: one JSON result per input, the oldest removed past
CACHE_SIZE. Results the verification computed are already in it when the version is installed.
"""

from __future__ import annotations

import pprint
from string import Template
from typing import Any

from pydantic import BaseModel, Field

from evolution.mutation import ParentTool
from evolution.versioning import evolved_manifest, version_stem
from selection.manifest import (
    ExecutableImplementation,
    HttpImplementation,
    PythonImplementation,
    ToolManifest,
    entrypoint_file,
    tool_key,
)

PARENT_DIR = "parent"
# The variable an evolved version of an http tool reads its parent's URL and headers from, as the
# parent's manifest reads now: its files hold the URL it evolved with, for the reader, and no headers
# (QA 55b M2: a bearer token was written under FITTEST_DATA_DIR, and a manifest edited in place, a
# moved service or a rotated token, never reached the evolved version).
PARENT_HTTP_ENV = "FITTEST_PARENT_HTTP"
WRAPPER_DOC = "Evolved version "  # how a generated module's docstring begins (_HEADER): how it is told apart


class InputRules(BaseModel):
    """How an input is adapted before the parent sees it; each rule applies only where it is needed."""

    renames: dict[str, str] = Field(default_factory=dict)  # key as callers send it -> key the parent reads
    types: dict[str, str] = Field(default_factory=dict)  # key -> int | float | str | bool | list
    defaults: dict[str, Any] = Field(default_factory=dict)  # key -> value when the input lacks it

    def __bool__(self) -> bool:
        return bool(self.renames or self.types or self.defaults)

    def describe(self) -> str:
        parts = [f"rename {a}→{b}" for a, b in self.renames.items()]
        parts += [f"{k} as {t}" for k, t in self.types.items()]
        parts += [f"default {k}={v!r}" for k, v in self.defaults.items()]
        return ", ".join(parts)


class RetryPolicy(BaseModel):
    attempts: int = Field(5, ge=2)
    multiplier_s: float = Field(0.05, gt=0)  # the exponential wait's unit, jittered
    max_wait_s: float = Field(1.0, gt=0)
    budget_s: float = Field(gt=0)  # no retry starts after this much time

    def describe(self) -> str:
        return (
            f"retry when unavailable: up to {self.attempts} attempts within {self.budget_s:g}s, "
            f"jittered exponential backoff ({self.multiplier_s:g}s unit, at most {self.max_wait_s:g}s)"
        )


def wrap(
    parent: ParentTool,
    version: str,
    mutation: str,
    *,
    rules: InputRules | None = None,
    retry: RetryPolicy | None = None,
    cache_size: int = 0,
    timeout_s: float | None = None,
) -> tuple[ToolManifest, dict[str, bytes]]:
    """The manifest and files of a version that wraps `parent` with the given behaviour."""
    manifest = parent.manifest
    stem = version_stem(manifest.name, version)
    module_file = f"{stem}.py"
    impl = manifest.implementation
    files = {f"{PARENT_DIR}/{rel}": data for rel, data in parent.files.items()}
    constants = {
        "RENAMES": (rules or InputRules()).renames,
        "TYPES": (rules or InputRules()).types,
        "DEFAULTS": (rules or InputRules()).defaults,
        "RETRY": retry.model_dump(exclude_none=True) if retry else None,
        "CACHE_SIZE": cache_size,
    }
    if isinstance(impl, ExecutableImplementation):
        parent_ref: dict[str, Any] = {"kind": "executable", "argv": impl.argv, "evolved_file": manifest.evolved_file}
        body = _CACHE + _EXECUTABLE
        new_impl: dict[str, Any] = {"kind": "executable", "argv": ["{python}", "{tool_dir}/" + module_file]}
    elif isinstance(impl, HttpImplementation):
        parent_ref = {"kind": "http", "url": impl.url, "timeout_s": manifest.timeout_s}
        body = Template(_HTTP).substitute(env=PARENT_HTTP_ENV) + _CACHE + _RUN
        new_impl = {"kind": "python", "entrypoint": f"{stem}:run"}
    else:
        assert isinstance(impl, PythonImplementation)
        module, _, function = impl.entrypoint.partition(":")
        rel = entrypoint_file(impl.entrypoint)
        location = f"{PARENT_DIR}/{rel}" if rel in parent.files else None
        parent_ref = {"kind": "python", "file": location, "module": module, "function": function}
        body = _PYTHON + _CACHE + _RUN
        new_impl = {"kind": "python", "entrypoint": f"{stem}:run"}
    header = _HEADER.substitute(
        key=tool_key(manifest.name, version),
        parent_key=manifest.key,
        # The text goes into the module's docstring: a backslash (`\N`, `\x` in an input's key)
        # would be read as an escape and a triple quote would end it.
        mutation=mutation.replace("\\", "\\\\").replace('"""', "'''"),
    )
    lines = [header, f"PARENT = {_literal(parent_ref)}"]
    lines += [f"{name} = {_literal(value)}" for name, value in constants.items()]
    source = "\n".join(lines) + "\n" + _COMMON + body
    files[module_file] = source.encode("utf-8")
    changes: dict[str, Any] = {"implementation": new_impl, "evolved_file": module_file}
    if timeout_s is not None:
        changes["timeout_s"] = timeout_s
    return evolved_manifest(manifest, version, **changes), files


def _literal(value: Any) -> str:
    return pprint.pformat(value, width=100, sort_dicts=False)


_HEADER = Template('''"""Evolved version $key, generated by fittest from $parent_key.

Mutation: $mutation

The parent's files are unchanged under ./parent/. This module only adds what the constants below
say: RENAMES, TYPES and DEFAULTS adapt the input; RETRY retries an unavailable parent (an exception that says "not now", or exit status 69) with
jittered exponential backoff (tenacity); CACHE_SIZE keeps that many recent results in ./cache/.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
''')

_COMMON = '''
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def adapt(value: dict[str, Any]) -> dict[str, Any]:
    """The input as the parent expects it: renamed keys, coerced types, defaults for what is missing."""
    out = dict(value)
    for given, wanted in RENAMES.items():
        if given in out and wanted not in out:
            out[wanted] = out.pop(given)
    for key, kind in TYPES.items():
        if key in out:
            out[key] = _coerce(out[key], kind)
    for key, default in DEFAULTS.items():
        if key not in out:
            out[key] = json.loads(json.dumps(default))
    return out


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _coerce(value: Any, kind: str) -> Any:
    """The value as `kind` when it converts cleanly; otherwise unchanged, for the parent to judge."""
    try:
        if isinstance(value, bool):
            return value
        if kind in ("int", "float") and isinstance(value, str):
            number = _number(value.strip())  # "2" -> 2, "2.5" -> 2.5
            return value if isinstance(number, str) else number
        if kind == "int" and isinstance(value, float) and value.is_integer():
            return int(value)
        if kind == "str" and isinstance(value, (int, float)):
            return str(value)
        if kind == "bool" and isinstance(value, str) and value.strip().lower() in _BOOLS:
            return _BOOLS[value.strip().lower()]
        if kind == "list" and isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [_number(part.strip()) for part in text.split(",") if part.strip()]
        if kind == "list" and not isinstance(value, list):
            return [value]
    except ValueError:
        pass
    return value
'''

_RUN = '''

def _unavailable(exc: BaseException) -> bool:
    """Whether a failure of the parent says "not now" (worth a retry) rather than "not this input"."""
    import socket
    import urllib.error

    if isinstance(exc, urllib.error.HTTPError):
        return False
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError, socket.gaierror, urllib.error.URLError]
    try:
        import httpx

        kinds.append(httpx.TransportError)
    except ImportError:
        pass
    return isinstance(exc, tuple(kinds))


def _call(value: dict[str, Any]) -> Any:
    if RETRY is None:
        return _call_parent(value)
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential

    retrying = Retrying(
        retry=retry_if_exception(_unavailable),
        stop=stop_after_attempt(int(RETRY["attempts"])) | stop_after_delay(RETRY["budget_s"]),
        wait=wait_random_exponential(multiplier=RETRY["multiplier_s"], max=RETRY["max_wait_s"]),
        reraise=True,
    )
    return retrying(_call_parent, value)



def run(value: dict[str, Any]) -> Any:
    value = adapt(value)
    hit, result = _cached(value)
    if hit:
        return result
    result = _call(value)
    if CACHE_SIZE:  # a wrapper that does not cache does not serialise every result for nothing
        _remember(value, json.dumps(result))
    return result
'''

_PYTHON = '''

def _load_parent() -> Any:
    """The parent's function, from its file under ./parent/ (or its importable module)."""
    import hashlib
    import importlib
    import importlib.util

    if PARENT["file"] is None:
        module = importlib.import_module(PARENT["module"])
    else:
        path = HERE / PARENT["file"]
        # The parent's own sibling modules import as they did when it ran unwrapped.
        if str(HERE / "parent") not in sys.path:
            sys.path.insert(0, str(HERE / "parent"))
        name = "fittest_parent_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
    return getattr(module, PARENT["function"])


_parent = _load_parent()


def _call_parent(value: dict[str, Any]) -> Any:
    return _parent(value)
'''

_HTTP = '''

def _parent_http() -> tuple[str, dict[str, str]]:
    """The parent's URL and headers as its manifest reads now, which fittest hands this run in
    $env; without it (a run by hand), the URL it evolved with, and no headers."""
    import os

    given = os.environ.get("$env")
    if not given:
        return PARENT["url"], PARENT.get("headers", {})
    settings = json.loads(given)
    return settings["url"], settings["headers"]


def _call_parent(value: dict[str, Any]) -> Any:
    """POST to the parent's URL; map its answer to the exceptions fittest classifies."""
    import httpx

    url, headers = _parent_http()
    try:
        response = httpx.post(url, json=value, headers=headers, timeout=PARENT["timeout_s"])
    except httpx.TimeoutException as exc:
        raise TimeoutError(f"no response from {url}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise ConnectionError(f"cannot reach {url}: {exc}") from exc
    status = response.status_code
    if status == 408:
        raise TimeoutError(f"HTTP 408 from {url}")
    if status == 429 or status >= 500:
        raise ConnectionError(f"HTTP {status} from {url}: {response.text[:200]!r}")
    if status >= 400:
        raise ValueError(f"HTTP {status} from {url}: {response.text[:200]!r}")
    if not 200 <= status < 300:
        raise ConnectionError(f"unexpected HTTP {status} from {url} (redirects are not followed)")
    try:
        return response.json()
    except ValueError as exc:
        raise RuntimeError(f"{url} answered with something that is not JSON: {response.text[:200]!r}") from exc
'''

_CACHE = '''

def _cache_file(value: dict[str, Any]) -> Path:
    import hashlib

    return HERE / "cache" / (hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest() + ".json")


def _cached(value: dict[str, Any]) -> tuple[bool, Any]:
    if not CACHE_SIZE:
        return False, None
    try:
        return True, json.loads(_cache_file(value).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False, None


def _remember(value: dict[str, Any], text: str) -> None:
    """Keep a result (written whole, then renamed: a reader never sees half a file)."""
    if not CACHE_SIZE:
        return
    import os
    import tempfile

    try:
        folder = HERE / "cache"
        folder.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, _cache_file(value))
        for old in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-CACHE_SIZE]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # a cache that cannot be written is only a slower tool
'''

_EXECUTABLE = '''

def _fill(template: str, value: dict[str, Any]) -> str:
    """One argv entry of the parent, its placeholders filled as fittest's runner would."""
    import string

    out = []
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        if field == "tool_dir":
            out.append(str(HERE / "parent"))
        elif field == "python":
            out.append(sys.executable)
        elif field == "evolved_file" and PARENT["evolved_file"]:
            out.append(str(HERE / "parent" / PARENT["evolved_file"]))
        elif field in value:
            out.append(str(value[field]))
        else:
            raise KeyError(f"the parent's argv needs {{{field}}}, which the input lacks")
    return "".join(out)


def _run_parent(argv: list[str], value: dict[str, Any]) -> Any:
    """Run the parent once, or with RETRY while it exits 69 (EX_UNAVAILABLE: something it needs
    could not be reached, so a later try may succeed)."""
    import subprocess

    def once() -> Any:
        return subprocess.run(argv, input=json.dumps(value).encode("utf-8"), stdout=subprocess.PIPE)

    if RETRY is None:
        return once()
    from tenacity import Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_random_exponential

    retrying = Retrying(
        retry=retry_if_result(lambda done: done.returncode == 69),
        stop=stop_after_attempt(int(RETRY["attempts"])) | stop_after_delay(RETRY["budget_s"]),
        wait=wait_random_exponential(multiplier=RETRY["multiplier_s"], max=RETRY["max_wait_s"]),
        retry_error_callback=lambda state: state.outcome.result(),  # the last run's status and output
    )
    return retrying(once)


def main() -> None:
    """Adapt stdin, run the parent with it; its stdout, stderr and exit status are ours."""
    import os

    try:
        value = adapt(json.loads(sys.stdin.buffer.read()))
        argv = [_fill(t, value) for t in PARENT["argv"]]
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\\n")
        sys.exit(65)
    hit, result = _cached(value)
    if hit:
        json.dump(result, sys.stdout)
        sys.exit(0)
    done = _run_parent(argv, value)
    if done.returncode < 0:
        os.kill(os.getpid(), -done.returncode)
    if done.returncode == 0:
        _remember(value, done.stdout.decode("utf-8", errors="replace"))
    sys.stdout.buffer.write(done.stdout)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
'''
