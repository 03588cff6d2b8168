"""Which file the code mutator asks the model to rewrite: the tool's own code, also under the
wrappers that earlier evolutions put in front of it (QA evolution F5: the model was shown the
generated wrapper and rewrote it, dropping the input coercion, never seeing the code that failed)."""

from __future__ import annotations

from evolution.models import Evidence, FailedRun
from evolution.mutation import MutationContext, ParentTool
from evolution.mutators.code import CodeMutator, logic_file
from evolution.wrapper import InputRules, RetryPolicy, wrap
from selection.manifest import ToolManifest
from selection.models import FailureClass

TITLE = "def run(input):\n    if any(c.isdigit() for c in input['text']):\n        raise RuntimeError('digits confuse me')\n" \
        "    return {'title': input['text'].title()}\n"
FIXED = "def run(input):\n    return {'title': input['text'].title()}\n"


def title_case(kind: str = "python") -> ParentTool:
    implementation = ({"kind": "python", "entrypoint": "tc:run"} if kind == "python"
                      else {"kind": "executable", "argv": ["{python}", "{tool_dir}/tc.py"]})
    return ParentTool(manifest=ToolManifest(name="title_case", description="title case a heading", implementation=implementation),
                      files={"tc.py": TITLE.encode()})


def wrapped_twice(parent: ParentTool) -> ParentTool:
    """A coercion version (1.1.0) of `parent`, and a retry version (1.2.0) of that, as evolutions make them."""
    manifest, files = wrap(parent, "1.1.0", "rename txt→text", rules=InputRules(renames={"txt": "text"}))
    once = ParentTool(manifest=manifest, files=files)
    manifest, files = wrap(once, "1.2.0", "retry", retry=RetryPolicy(budget_s=1.0))
    return ParentTool(manifest=manifest, files=files)


def test_the_file_to_rewrite_is_the_tools_own_under_every_wrapper() -> None:
    assert logic_file(title_case().manifest, title_case().files) == "tc.py"
    twice = wrapped_twice(title_case())
    assert logic_file(twice.manifest, twice.files) == "parent/parent/tc.py"
    executable = wrapped_twice(title_case("executable"))
    assert logic_file(executable.manifest, executable.files) == "parent/parent/tc.py"


def test_a_rewrite_of_a_wrapped_tool_replaces_its_code_and_keeps_the_wrappers() -> None:
    twice = wrapped_twice(title_case())
    asked: list[str] = []

    def chat(messages: list[dict[str, str]], deadline: float | None) -> str:
        asked.append(messages[-1]["content"])
        return f"Digits are fine now.\n```python\n{FIXED}```\n"

    failure = FailedRun(version="1.2.0", input={"txt": "2 dogs"}, error_class=FailureClass.crash,
                        error_message="RuntimeError: digits confuse me (at tc.py:3)")
    ctx = MutationContext(parent=twice, evidence=Evidence(failures=[failure]), version="1.3.0", trigger="call")
    (candidate,) = CodeMutator(chat=chat, model="test-model").propose(ctx).candidates
    assert "File `parent/parent/tc.py`" in asked[0] and "digits confuse me" in asked[0] and "generated wrappers" in asked[0]
    assert candidate.files["parent/parent/tc.py"] == FIXED.encode()
    assert {rel: data for rel, data in candidate.files.items() if rel != "parent/parent/tc.py"} == {
        rel: data for rel, data in twice.files.items() if rel != "parent/parent/tc.py"}  # the wrappers, unchanged
    assert candidate.mutation.startswith("parent/parent/tc.py rewritten by test-model")
