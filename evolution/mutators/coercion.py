"""bad input → coercion of input keys and types, plus defaults taken from the tool's test cases.

The tool's own test cases are the only statement of what a good input looks like: the keys its
valid cases use (and which of them every valid case has), the JSON type of each key's values, and
the values they take. Rules are inferred only from what the failing inputs get wrong:

- rename: a key the tool never sees, standing in for a key every valid case has (same name up to
  case, `_` and `-`, or a close spelling, or the only unknown key for the only missing one);
- type: a value of another JSON type than the tool's cases use, of a kind the wrapper converts
  (`"3"` → 3, 3 → `"3"`, `"a,b"` → a list, `"yes"` → true);
- default: a key still missing that the valid cases always have (or that the error message names),
  when its values there are scalars and most cases agree on one: that one. Text, lists, objects and
  values the cases disagree on (the payload of a call, not a setting) are never made up.

The tool's `expect_error` cases keep the rules honest: a rule that makes one of them succeed fails
verification.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import Any

from evolution.models import CandidateVersion, FailedRun
from evolution.mutation import FailureClassMutator, MutationContext, Proposal
from evolution.wrapper import InputRules, wrap
from selection.manifest import ToolManifest
from selection.models import FailureClass

CLOSE_SPELLING = 0.6
MAX_DEFAULT_CHARS = 32
# (kind given, kind wanted) pairs the wrapper's _coerce converts. An int given for a float needs
# no rule (JSON numbers are both), and a bool is never converted (True is no list and no number).
CONVERTIBLE = {
    ("str", "int"), ("str", "float"), ("str", "bool"), ("str", "list"),
    ("int", "str"), ("float", "str"), ("float", "int"),
    ("int", "list"), ("float", "list"), ("object", "list"),
}
_QUOTED = re.compile(r"'([A-Za-z_][\w-]*)'")


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null"


def _normal(key: str) -> str:
    return re.sub(r"[_\-\s]", "", key.lower())


class Schema:
    """What the valid test cases say about inputs."""

    def __init__(self, manifest: ToolManifest) -> None:
        valid = [c.input for c in manifest.test_cases if not c.expect_error]
        self.valid = valid
        self.known: set[str] = set().union(*(set(v) for v in valid)) if valid else set()
        self.required: set[str] = set.intersection(*(set(v) for v in valid)) if valid else set()
        self.kinds: dict[str, str] = {}
        for key in self.known:
            kinds = {kind_of(v[key]) for v in valid if key in v}
            if kinds == {"int", "float"}:
                kinds = {"float"}
            if len(kinds) == 1:
                self.kinds[key] = kinds.pop()

    def default(self, key: str) -> tuple[bool, Any]:
        """The value most valid cases agree on (more than half of those that have the key)."""
        values = [v[key] for v in self.valid if key in v]
        usable = [x for x in values if isinstance(x, (bool, int, float)) or (isinstance(x, str) and len(x) <= MAX_DEFAULT_CHARS)]
        if not values or len(usable) != len(values):
            return False, None
        counts = Counter(map(repr, usable))
        best = max(counts.values())
        if best * 2 <= len(values):
            return False, None  # the cases disagree: a payload, not a setting with a usual value
        return True, next(x for x in usable if counts[repr(x)] == best)


def _rename_target(key: str, missing: set[str]) -> str | None:
    for target in sorted(missing):
        if _normal(target) == _normal(key) or _normal(target).rstrip("s") == _normal(key).rstrip("s"):
            return target
    close = difflib.get_close_matches(key, sorted(missing), n=1, cutoff=CLOSE_SPELLING)
    return close[0] if close else None


def infer_rules(schema: Schema, failures: list[FailedRun]) -> InputRules:
    rules = InputRules()
    for failure in failures:
        given = set(failure.input)
        unknown = sorted(given - schema.known - set(rules.renames))
        missing = schema.required - given - {rules.renames.get(k, "") for k in given}
        for key in unknown:
            target = _rename_target(key, missing)
            if target is not None:
                rules.renames[key] = target
                missing.discard(target)
        left = [k for k in unknown if k not in rules.renames]
        if len(left) == 1 and len(missing) == 1:
            rules.renames[left[0]] = missing.pop()
        named = {m for m in _QUOTED.findall(failure.error_message) if m in schema.known}
        adapted = {rules.renames.get(k, k): v for k, v in failure.input.items()}
        for key, value in adapted.items():
            wanted = schema.kinds.get(key)
            if wanted is not None and (kind_of(value), wanted) in CONVERTIBLE:
                rules.types[key] = wanted
        for key in sorted((missing | named) - set(adapted)):
            ok, value = schema.default(key)
            if ok:
                rules.defaults[key] = value
    return rules


class CoercionMutator(FailureClassMutator):
    name = "coerce"
    handles = frozenset({FailureClass.bad_input})

    def propose(self, ctx: MutationContext) -> Proposal:
        failures = self.failures(ctx)
        if not failures:
            return Proposal.none("no bad input among the failures to fix")
        schema = Schema(ctx.parent.manifest)
        if not schema.valid:
            return Proposal.none("the tool has no valid test cases to learn its input from")
        rules = infer_rules(schema, failures)
        if not rules:
            return Proposal.none("no renamed key, wrong type or missing default explains the failing input")
        mutation = f"input coercion: {rules.describe()}"
        manifest, files = wrap(ctx.parent, ctx.version, mutation, rules=rules)
        return Proposal(candidates=[CandidateVersion(mutator=self.name, mutation=mutation, manifest=manifest, files=files)])
