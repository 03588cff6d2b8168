"""A code mutator: an OpenAI-compatible chat model rewrites the tool's source file.

It sends the parent's code, the failures to fix and what is known around them (test cases,
similar past failures, mutations that already failed) and takes the code from the reply's fenced
block. A reply without a code block, or with code that does not compile, proposes nothing. The
chat itself is injected (workers/llm.py talks HTTP), so this module stays free of services.

A rewrite is identified by its code (a digest of the candidate's files), never by the reply's
prose: two rewrites both summed up as "Fixed." are different mutations, and the same code under
another summary is the same one.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import PurePosixPath

from evolution.models import CandidateVersion
from evolution.mutation import MutationContext, Proposal
from evolution.versioning import evolved_manifest
from evolution.wrapper import PARENT_DIR, WRAPPER_DOC
from selection.manifest import ExecutableImplementation, PythonImplementation, ToolManifest, entrypoint_file
from selection.models import FailureClass
from selection.registry import TOOL_DIR_PLACEHOLDER

Chat = Callable[[list[dict[str, str]], float | None], str]  # (messages, deadline on time.monotonic()) -> reply

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
MAX_SOURCE_CHARS = 40_000
HINTS = {
    "timeout": "It is too slow for some inputs: make it faster without changing its results.",
    "crash": "It raises an unexpected exception: find the cause and handle those inputs correctly.",
    "bad_input": "It rejects inputs callers send: accept them if their meaning is clear, keep rejecting real errors.",
    "bad_output": "Its output is empty, not JSON, or too large: return a proper JSON value.",
    "unavailable": "An upstream it needs is unavailable at times: make it resilient.",
}


def source_file(manifest: ToolManifest, files: dict[str, bytes]) -> str | None:
    """The python file that holds the tool's logic, relative to its folder."""
    impl = manifest.implementation
    if isinstance(impl, PythonImplementation):
        rel = entrypoint_file(impl.entrypoint)
        return rel if rel in files else None
    if isinstance(impl, ExecutableImplementation):
        marker = "{" + TOOL_DIR_PLACEHOLDER + "}/"
        for arg in impl.argv:
            if arg.startswith(marker) and arg.endswith(".py") and arg[len(marker):] in files:
                return arg[len(marker):]
    return None


def logic_file(manifest: ToolManifest, files: dict[str, bytes]) -> str | None:
    """The file that holds the tool's own logic: its source file (`source_file`), or, for a version
    an evolution wrapped (input coercion, retries, a cache: evolution/wrapper.py), the file that
    wrapper calls, under `parent/`, through every wrapper in between. A rewrite replaces that one
    file, so the wrappers' behaviour stays. The model was shown the generated wrapper, never the
    code that failed, and its rewrite dropped what the wrapper added (QA evolution F5)."""
    target = source_file(manifest, files)
    while target is not None and (inner := wrapped_file(files, target)) is not None:
        target = inner
    return target


def wrapped_file(files: dict[str, bytes], rel: str) -> str | None:
    """The python file the generated wrapper module `rel` calls (its PARENT), relative to the
    version's folder; None when `rel` is no generated wrapper or wraps no python file of its own."""
    try:
        tree = ast.parse(files[rel].decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    if not (ast.get_docstring(tree) or "").startswith(WRAPPER_DOC):
        return None
    found = [n.value for n in tree.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "PARENT" for t in n.targets)]
    try:
        parent = ast.literal_eval(found[0]) if found else None
    except ValueError:
        return None
    here = PurePosixPath(rel).parent
    inner = None
    if isinstance(parent, dict) and parent.get("kind") == "python" and parent.get("file"):
        inner = str(here / parent["file"])
    elif isinstance(parent, dict) and parent.get("kind") == "executable":
        marker = "{" + TOOL_DIR_PLACEHOLDER + "}/"
        scripts = [a[len(marker):] for a in parent.get("argv", []) if isinstance(a, str) and a.startswith(marker) and a.endswith(".py")]
        inner = str(here / PARENT_DIR / scripts[0]) if scripts else None
    return inner if inner in files else None


def extract_code(reply: str) -> str | None:
    """The longest python (or untagged) fenced block of a reply; None when there is none."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(reply)]
    python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    plain = [b for lang, b in blocks if not lang]
    chosen = python or plain
    if not chosen:
        return None
    code = max(chosen, key=len).strip("\n") + "\n"
    return code if code.strip() else None


def files_digest(files: dict[str, bytes]) -> str:
    """A digest of a version's files, names and contents: what a rewrite is, whatever it is called."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()


def _summary(reply: str) -> str:
    prose = _FENCE.sub(" ", reply)
    line = next((ln.strip() for ln in prose.splitlines() if ln.strip()), "")
    return line[:100]


class CodeMutator:
    name = "code"
    handles: frozenset[FailureClass] = frozenset()  # not tied to a failure class
    cost = 10

    def __init__(self, chat: Chat, model: str) -> None:
        self.chat = chat
        self.model = model

    def messages(self, ctx: MutationContext, target: str, source: str) -> list[dict[str, str]]:
        parent = ctx.parent.manifest
        ev = ctx.evidence
        failures = [
            {"input": f.input, "error_class": f.error_class.value, "error": f.error_message[:500]} for f in ev.failures[:5]
        ]
        hints = sorted({HINTS[f.error_class.value] for f in ev.failures})
        wrapped = ("This file is called by the generated wrappers of earlier evolutions (input coercion, retries, "
                   "a cache), which stay: keep its function's name, input keys and output as they are."
                   if target.startswith(f"{PARENT_DIR}/") else "")
        sections = [
            f"Tool `{parent.name}` version {parent.version}: {parent.description}",
            f"File `{target}`:\n```python\n{source[:MAX_SOURCE_CHARS]}\n```",
            wrapped,
            "Failures to fix:\n" + json.dumps(failures, indent=1, default=str),
            "Hints: " + " ".join(hints) if hints else "",
        ]
        if parent.test_cases:
            cases = [c.model_dump(exclude_defaults=True) for c in parent.test_cases[:10]]
            sections.append("Test cases it must keep passing:\n" + json.dumps(cases, indent=1, default=str))
        if ev.similar_failures:
            sections.append("Similar failures before: " + "; ".join(f"{p.error_class.value}: {p.message[:120]}" for p in ev.similar_failures[:5]))
        if ev.failed_mutations:
            sections.append("Changes that already failed: " + "; ".join(f"{m.mutation} ({m.reason[:100]})" for m in ev.failed_mutations[:5]))
        return [
            {
                "role": "system",
                "content": "You repair one Python source file of a tool. Keep its interface (the same function, "
                "the same input keys, the same JSON output). Reply with one sentence saying what you changed, "
                "then the complete corrected file in one ```python block.",
            },
            {"role": "user", "content": "\n\n".join(s for s in sections if s)},
        ]

    def propose(self, ctx: MutationContext) -> Proposal:
        files = ctx.parent.files
        target = logic_file(ctx.parent.manifest, files)
        if target is None:
            return Proposal.none("no python source file of the tool to rewrite")
        try:
            source = files[target].decode("utf-8")
        except UnicodeDecodeError:
            return Proposal.none(f"{target} is not UTF-8 text")
        try:
            reply = self.chat(self.messages(ctx, target, source), ctx.deadline)
        except Exception as exc:  # the endpoint's failure is a note, not an evolution crash
            return Proposal.none(f"the model endpoint failed: {type(exc).__name__}: {str(exc)[:200]}")
        code = extract_code(reply)
        if code is None:
            return Proposal.none("the model's reply had no usable code (no fenced code block)")
        try:
            compile(code, target, "exec")
        except SyntaxError as exc:
            return Proposal.none(f"the model's code does not compile: {exc.msg} (line {exc.lineno})")
        if code.strip() == source.strip():
            return Proposal.none("the model returned the parent's code unchanged")
        mutation = f"{target} rewritten by {self.model}: {_summary(reply) or 'no explanation given'}"
        rewritten = {**files, target: code.encode("utf-8")}
        return Proposal(
            candidates=[
                CandidateVersion(
                    mutator=self.name,
                    mutation=mutation,
                    manifest=evolved_manifest(ctx.parent.manifest, ctx.version),
                    files=rewritten,
                    identity=f"code:{files_digest(rewritten)}",
                )
            ]
        )
