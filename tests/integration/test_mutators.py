"""Each built-in mutator on a tool it can fix and on one it cannot, judged by the real verification
cascade: every stage in a subprocess of the sandbox. The code mutator talks to a small
OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evolution.models import CandidateVersion, Evidence, FailedRun, StageResult, SuccessfulRun, Trigger, shape_of
from evolution.mutation import MutationContext, MutatorConfig, Proposal
from evolution.mutators.coercion import CoercionMutator
from evolution.mutators.description import DescriptionMutator
from evolution.mutators.retry import RetryMutator
from evolution.mutators.timeout import TimeoutMutator
from evolution.verification import VerifyConfig, reproduce_successes, verify
from selection.manifest import ToolManifest
from selection.models import FailureClass
from tests.conftest import upstream, write_tool
from workers.evolver import read_parent, write_version
from workers.llm import code_mutator
from workers.runners import RunLimits
from workers.sandbox import SubprocessSandbox

SANDBOX = SubprocessSandbox(RunLimits())
CONFIG = VerifyConfig(static_timeout_s=30, stage_timeout_s=30, replay_successes=3)


def failing(error_class: FailureClass, message: str = "", **input: Any) -> FailedRun:
    return FailedRun(version="1.0.0", input=input, error_class=error_class, error_message=message)


def propose(mutator: Any, parent: ToolManifest, evidence: Evidence, trigger: Trigger = "call") -> Proposal:
    return mutator.propose(MutationContext(parent=read_parent(parent), evidence=evidence, version="1.1.0", trigger=trigger))


def verified(proposal: Proposal, evidence: Evidence, tmp: Path) -> list[list[StageResult]]:
    """The stage results of every candidate, each verified from its own folder."""
    results = []
    for i, candidate in enumerate(proposal.candidates):
        staged = write_version(tmp / f"candidate{i}", candidate.manifest, candidate.files)
        results.append(verify(staged, evidence, SANDBOX, CONFIG, changes_behaviour=candidate.changes_behaviour))
    return results


def passed(stages: list[StageResult]) -> bool:
    return [s.stage for s in stages] == ["static", "tests", "replay"] and all(s.passed for s in stages)


def all_passed(results: list[list[StageResult]]) -> bool:
    return bool(results) and all(passed(stages) for stages in results)


# ------------------------------------------------------------------------------------ timeout
SLOW = """
import time
def run(value):
    time.sleep(value["n"] / 10)
    return {"n": value["n"]}
"""


def test_timeout_mutator_gives_a_slow_tool_the_time_it_needs(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "slowish", SLOW, timeout_s=0.3, test_cases=[{"input": {"n": 1}, "expect": {"n": 1}}])
    evidence = Evidence(failures=[failing(FailureClass.timeout, "no result within 0.3s", n=6)])
    proposal = propose(TimeoutMutator(MutatorConfig(max_timeout_s=120)), parent, evidence)
    assert [c.mutation for c in proposal.candidates] == ["timeout_s 0.3s → 1.2s"]
    assert proposal.candidates[0].manifest.timeout_s == 1.2
    assert all_passed(verified(proposal, evidence, tmp_path))


def test_timeout_mutator_cannot_fix_a_tool_that_hangs(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "hangs", "def run(value):\n    while True:\n        pass\n", timeout_s=0.3)
    evidence = Evidence(failures=[failing(FailureClass.timeout, n=1)])
    (stages,) = verified(propose(TimeoutMutator(MutatorConfig()), parent, evidence), evidence, tmp_path)
    assert stages[-1].stage == "replay" and not stages[-1].passed
    assert "still fails: timeout" in stages[-1].problems[0]
    at_bound = propose(TimeoutMutator(MutatorConfig(max_timeout_s=0.3)), parent, evidence)
    assert not at_bound.candidates and "already at the bound" in at_bound.note


def test_timeout_mutator_fixes_a_script_its_argv_runs_directly(tmp_path: Path) -> None:
    """QA: the evolved copy of `{tool_dir}/run.sh` lost its execute bit (files travel as bytes), so
    every candidate of such a tool failed its replay with 'Permission denied'."""
    folder = tmp_path / "sleepy"
    folder.mkdir()
    (folder / "run.sh").write_text('#!/bin/sh\ncat >/dev/null\nsleep 0.6\necho \'{"ok": true}\'\n')
    (folder / "run.sh").chmod(0o755)
    (folder / "notes.txt").write_text("not a program\n")
    parent = write_tool(tmp_path, "sleepy", None, description="waits, then says ok", timeout_s=0.3,
                        implementation={"kind": "executable", "argv": ["{tool_dir}/run.sh"]})
    evidence = Evidence(failures=[failing(FailureClass.timeout, "no result within 0.3s")])
    proposal = propose(TimeoutMutator(MutatorConfig(max_timeout_s=120)), parent, evidence)
    assert all_passed(verified(proposal, evidence, tmp_path))
    assert not os.access(tmp_path / "candidate0" / "notes.txt", os.X_OK)  # a file that is not a program stays plain


# ------------------------------------------------------------------------------------ retry
FLAKY = """
import itertools
_calls = itertools.count(1)
def run(value):
    if next(_calls) % 2:
        raise ConnectionError("upstream refused the connection")
    return {"echo": value["x"]}
"""


def test_retry_mutator_fixes_a_flaky_upstream_with_generated_inspectable_code(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "flaky", FLAKY, test_cases=[{"input": {"x": 1}, "expect": {"echo": 1}}])
    evidence = Evidence(failures=[failing(FailureClass.unavailable, "ConnectionError", x=2)])
    proposal = propose(RetryMutator(MutatorConfig()), parent, evidence)
    (candidate,) = proposal.candidates
    source = candidate.files["flaky_v1_1_0.py"].decode()
    assert "RETRY = {'attempts': 5" in source and "wait_random_exponential" in source
    assert candidate.files["parent/tool.py"] == (tmp_path / "flaky" / "tool.py").read_bytes()
    assert candidate.manifest.implementation.entrypoint == "flaky_v1_1_0:run"  # type: ignore[union-attr]
    assert all_passed(verified(proposal, evidence, tmp_path))


def test_retry_mutator_cannot_fix_an_upstream_that_is_always_down(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "down", "def run(value):\n    raise ConnectionError('refused')\n", timeout_s=1)
    evidence = Evidence(failures=[failing(FailureClass.unavailable, x=1)])
    (stages,) = verified(propose(RetryMutator(MutatorConfig()), parent, evidence), evidence, tmp_path)
    # Retrying cannot make it pass: the replay still fails (unavailable, or the retries run into
    # the tool's timeout on a loaded machine), so the candidate is never served.
    assert not stages[-1].passed and "still fails" in stages[-1].problems[0]


FLAKY_AND_PARTICULAR = """
import itertools
_calls = itertools.count(1)
def run(value):
    if next(_calls) % 2:
        raise ConnectionError("upstream refused the connection")
    if "x" not in value:
        raise ValueError("x is required")
    return {"echo": value["x"]}
"""


def test_a_fix_is_not_refused_for_an_input_of_another_tools_job(tmp_path: Path) -> None:
    """A scenario-only call tried this flaky tool first on an input that is not its job: the
    retry fixes the unavailability, and the tool then refuses that input as bad input, which is
    its right. The fix passes; the refusal is noted, not counted against it."""
    parent = write_tool(tmp_path, "particular", FLAKY_AND_PARTICULAR, test_cases=[{"input": {"x": 1}, "expect": {"echo": 1}}])
    evidence = Evidence(failures=[failing(FailureClass.unavailable, "ConnectionError", x=2),
                                  failing(FailureClass.unavailable, "ConnectionError", number=49)])
    (stages,) = verified(propose(RetryMutator(MutatorConfig()), parent, evidence), evidence, tmp_path)
    assert passed(stages)
    (note,) = stages[-1].problems
    assert '{"number": 49}' in note and "refuses it as bad input" in note


def test_an_input_refused_before_must_now_succeed(tmp_path: Path) -> None:
    """The exception is only for inputs that failed for another reason: an input the parent
    refused must be served by the candidate, or the candidate fixed nothing."""
    parent = write_tool(tmp_path, "particular", FLAKY_AND_PARTICULAR, test_cases=[{"input": {"x": 1}, "expect": {"echo": 1}}])
    evidence = Evidence(failures=[failing(FailureClass.unavailable, "ConnectionError", x=2),
                                  failing(FailureClass.bad_input, "x is required", number=49)])
    (stages,) = verified(propose(RetryMutator(MutatorConfig()), parent, evidence), evidence, tmp_path)
    assert stages[-1].stage == "replay" and not stages[-1].passed
    assert stages[-1].problems == [stages[-1].problems[0]] and "still fails: bad_input" in stages[-1].problems[0]


def test_a_candidate_that_refuses_every_input_fails_its_replay(tmp_path: Path) -> None:
    """Refusing is accepted only from a candidate that serves something: one that refuses every
    input has not fixed the failure, it has hidden it."""
    parent = write_tool(tmp_path, "refuser", "def run(value):\n    raise ValueError('no')\n")
    evidence = Evidence(failures=[failing(FailureClass.unavailable, "ConnectionError", x=2)])
    (stages,) = verified(propose(RetryMutator(MutatorConfig()), parent, evidence), evidence, tmp_path)
    assert stages[-1].stage == "replay" and not stages[-1].passed
    assert "still fails: bad_input" in stages[-1].problems[0]


BUSY_EXE = """
import json, sys
from pathlib import Path
marker = Path(__file__).with_name("busy")  # every other run finds its upstream busy
value = json.load(sys.stdin)
if marker.exists():
    marker.unlink()
    json.dump({"echo": value["x"]}, sys.stdout)
else:
    marker.touch()
    print("upstream busy", file=sys.stderr)
    sys.exit(69)
"""


def test_retry_mutator_retries_an_executable_that_exits_unavailable(tmp_path: Path) -> None:
    """Exit 69 (EX_UNAVAILABLE) is an executable's "something I need is not there now": the
    wrapper runs it again with the retry policy, as it retries a python tool's ConnectionError."""
    parent = write_tool(tmp_path, "busy", BUSY_EXE, implementation={"kind": "executable", "argv": ["{python}", "{tool_dir}/tool.py"]},
                       test_cases=[{"input": {"x": 1}, "expect": {"echo": 1}}])
    evidence = Evidence(failures=[failing(FailureClass.unavailable, "the tool could not reach what it needs (exit 69)", x=2)])
    proposal = propose(RetryMutator(MutatorConfig()), parent, evidence)
    (candidate,) = proposal.candidates
    assert candidate.manifest.implementation.kind == "executable"
    (stages,) = verified(proposal, evidence, tmp_path)
    assert passed(stages) and stages[-1].checked == 1


@pytest.fixture
def flaky_http() -> Iterator[str]:
    """An upstream that answers 503 to every other request."""
    with upstream('(503, {"error": "busy"}) if next(count) % 2 else (200, {"double": body["x"] * 2})') as base:
        yield f"{base}/double"


def test_retry_mutator_wraps_an_http_tool(tmp_path: Path, flaky_http: str) -> None:
    parent = write_tool(tmp_path, "doubler", None, description="double x", implementation={"kind": "http", "url": flaky_http},
                        # 5 s, not 2: the evolved version is a python process that imports httpx and tenacity
                        # before its first request, which took 2.9 s once under the suite's parallel load.
                        timeout_s=5, test_cases=[{"input": {"x": 2}, "expect": {"double": 4}}])
    evidence = Evidence(failures=[failing(FailureClass.unavailable, "HTTP 503", x=5)])
    proposal = propose(RetryMutator(MutatorConfig()), parent, evidence)
    assert proposal.candidates[0].manifest.implementation.kind == "python"
    assert all_passed(verified(proposal, evidence, tmp_path))


def test_an_evolved_http_tool_calls_its_parent_as_the_manifest_reads_now_and_keeps_no_header(tmp_path: Path) -> None:
    """QA 55b M2: an evolved version of an http tool held the URL and the bearer token its manifest had
    when it evolved, in plain text under FITTEST_DATA_DIR, and went on calling the old URL with the
    revoked token after the manifest was edited in place. It is now handed its parent's settings as
    the registry reads them (`ToolRegistry.http_root`), by the executor (`Candidate.parent_http`) and
    by the verification sandbox alike."""
    from selection.manifest import load_manifest
    from selection.registry import ToolRegistry
    from workers.runners import run_tool

    echo = '200, {"path": self.path, "auth": self.headers.get("Authorization"), "x": body["x"]}'
    with upstream(echo) as base:
        parent = write_tool(tmp_path / "tools", "authed", None, description="echo x through the gateway", timeout_s=10,
                            implementation={"kind": "http", "url": f"{base}/old", "headers": {"Authorization": "Bearer TOKEN-OLD"}})
        proposal = propose(RetryMutator(MutatorConfig()), parent,
                           Evidence(failures=[failing(FailureClass.unavailable, "HTTP 503", x=1)]))
        (candidate,) = proposal.candidates
        evolved = write_version(tmp_path / "data" / "authed_v1_1_0", candidate.manifest, candidate.files)
        # ...and a version that stays an http tool (a longer timeout): its manifest keeps no header either
        (longer,) = propose(TimeoutMutator(MutatorConfig()), parent,
                            Evidence(failures=[failing(FailureClass.timeout, "no result within 10s", x=1)])).candidates
        patient = write_version(tmp_path / "data" / "authed_v1_2_0",
                                longer.manifest.model_copy(update={"version": "1.2.0"}), longer.files)
        assert patient.implementation.kind == "http"
        written = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and b"TOKEN-OLD" in p.read_bytes()]
        assert written == []
        registry = ToolRegistry()
        registry.add(parent, source=tmp_path / "tools" / "authed" / "tool.yaml")
        registry.add(evolved)
        registry.add(patient)
        assert registry.http_root(evolved) == registry.http_root(patient) == parent.implementation
        # The manifest edited in place: the service moved, the token rotated.
        manifest_file = tmp_path / "tools" / "authed" / "tool.yaml"
        manifest_file.write_text(manifest_file.read_text().replace("/old", "/new").replace("TOKEN-OLD", "TOKEN-NEW"))
        registry.replace(load_manifest(manifest_file), manifest_file)
        now = {"path": "/new", "auth": "Bearer TOKEN-NEW"}
        for version in (evolved, patient):
            ran = run_tool(version, {"x": 3}, timeout_s=20, limits=RunLimits(), parent_http=registry.http_root(version))
            assert ran.success and ran.output == {**now, "x": 3}, (version.key, ran.error_message)
        staged = SubprocessSandbox(RunLimits(), registry.http_root).run(evolved, [{"x": 4}], 60)
        assert staged.died is None and staged.results[0].output == {**now, "x": 4}


# ------------------------------------------------------------------------------------ coercion
WORDS = """
def run(value):
    text = value["text"]
    if not isinstance(text, str):
        raise TypeError("text must be a string")
    return {"words": len(text.split())}
"""


def test_coercion_mutator_maps_a_renamed_key(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "words", WORDS, test_cases=[{"input": {"text": "a b"}, "expect": {"words": 2}}])
    evidence = Evidence(failures=[failing(FailureClass.bad_input, "KeyError: 'text'", content="one two three")])
    proposal = propose(CoercionMutator(MutatorConfig()), parent, evidence)
    assert [c.mutation for c in proposal.candidates] == ["input coercion: rename content→text"]
    assert all_passed(verified(proposal, evidence, tmp_path))


def test_a_wrapped_tool_still_imports_its_sibling_modules(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "counter", "from counting import count\ndef run(value):\n    return count(value)\n",
                       test_cases=[{"input": {"text": "a b"}, "expect": {"words": 2}}])
    (tmp_path / "counter" / "counting.py").write_text(textwrap.dedent(WORDS).replace("def run(", "def count("))
    evidence = Evidence(failures=[failing(FailureClass.bad_input, "KeyError: 'text'", content="one two three")])
    proposal = propose(CoercionMutator(MutatorConfig()), parent, evidence)
    assert [c.mutation for c in proposal.candidates] == ["input coercion: rename content→text"]
    assert all_passed(verified(proposal, evidence, tmp_path))


def test_coercion_that_breaks_an_expected_error_fails_the_test_cases(tmp_path: Path) -> None:
    cases = [{"input": {"text": "a b"}, "expect": {"words": 2}}, {"input": {"text": 42}, "expect_error": True}]
    parent = write_tool(tmp_path, "strict", WORDS, test_cases=cases)
    evidence = Evidence(failures=[failing(FailureClass.bad_input, "TypeError", text=7)])
    proposal = propose(CoercionMutator(MutatorConfig()), parent, evidence)
    assert [c.mutation for c in proposal.candidates] == ["input coercion: text as str"]
    (stages,) = verified(proposal, evidence, tmp_path)
    assert stages[-1].stage == "tests" and not stages[-1].passed
    assert "expected an error" in stages[-1].problems[0]


def test_coercion_mutator_proposes_nothing_without_test_cases(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "bare", WORDS)
    proposal = propose(CoercionMutator(MutatorConfig()), parent, Evidence(failures=[failing(FailureClass.bad_input, content="x")]))
    assert not proposal.candidates and "no valid test cases" in proposal.note


# ------------------------------------------------------------------------------------ description
def test_description_mutator_adds_successful_scenarios_as_examples(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "roman", "def run(v):\n    return {'roman': 'IV' if v['n'] == 4 else 'X'}\n",
                       test_cases=[{"input": {"n": 4}, "expect": {"roman": "IV"}}])
    successes = [SuccessfulRun(scenario="write 4 in roman numerals", input={"n": 4}, shape=shape_of({"roman": "IV"})),
                 SuccessfulRun(scenario="roman numeral for ten", input={"n": 10}, shape=shape_of({"roman": "X"}))]
    evidence = Evidence(successes=successes)
    proposal = propose(DescriptionMutator(MutatorConfig()), parent, evidence, trigger="manual")
    (candidate,) = proposal.candidates
    assert candidate.manifest.examples == ["write 4 in roman numerals", "roman numeral for ten"]
    assert not candidate.changes_behaviour
    (stages,) = verified(proposal, evidence, tmp_path)
    assert passed(stages) and stages[-1].checked == 2  # both successes replayed with their shape


def test_description_mutator_cannot_fix_a_failing_input_or_add_nothing_new(tmp_path: Path) -> None:
    parent = write_tool(tmp_path, "same", "def run(v):\n    return 1\n", examples=["count things"])
    on_call = propose(DescriptionMutator(MutatorConfig()), parent, Evidence(successes=[SuccessfulRun(scenario="new words")]))
    assert not on_call.candidates and "cannot make a failing input succeed" in on_call.note
    known = propose(DescriptionMutator(MutatorConfig()), parent, Evidence(successes=[SuccessfulRun(scenario="Count  things")]), "manual")
    assert not known.candidates and "no successful scenario" in known.note


# ------------------------------------------------------------------------------------ code (LLM)
class ChatServer:
    """An OpenAI-compatible chat completions endpoint on loopback, answering from a script."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, str]] = []
        self.requests: list[dict[str, Any]] = []
        self.delay_s = 0.0  # how long each answer takes
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                time.sleep(server.delay_s)
                status, content = server.replies.pop(0)
                answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]} if status == 200 else {"error": "down"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.stop()


BUGGY = "def run(value):\n    return {'mean': sum(value['xs']) / len(value['xs'])}\n"
FIXED = "def run(value):\n    xs = value['xs']\n    return {'mean': sum(xs) / len(xs) if xs else 0.0}\n"


def code_parent(tmp_path: Path) -> tuple[ToolManifest, Evidence]:
    parent = write_tool(tmp_path, "mean", BUGGY, test_cases=[{"input": {"xs": [1, 2, 3]}, "expect": {"mean": 2.0}}])
    return parent, Evidence(failures=[failing(FailureClass.crash, "ZeroDivisionError: division by zero", xs=[])])


def test_code_mutator_takes_the_fixed_code_from_the_reply(tmp_path: Path, chat: ChatServer) -> None:
    chat.replies = [(500, ""), (200, f"Guarded the empty list.\n```python\n{FIXED}```\n")]  # one retried 500 first
    mutator = code_mutator(MutatorConfig(llm_url=chat.url, llm_model="test-model", llm_api_key="sk-test"))
    parent, evidence = code_parent(tmp_path)
    proposal = propose(mutator, parent, evidence)
    (candidate,) = proposal.candidates
    assert candidate.files["tool.py"].decode() == FIXED
    assert candidate.mutation == "tool.py rewritten by test-model: Guarded the empty list."
    request = chat.requests[-1]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "test-model"
    prompt = request["body"]["messages"][-1]["content"]
    assert BUGGY.strip() in prompt and "ZeroDivisionError" in prompt and '"xs": []' in prompt
    chat.stop()  # no server thread while the sandbox forks
    assert all_passed(verified(proposal, evidence, tmp_path))



def success(output: Any, **input: Any) -> SuccessfulRun:
    return SuccessfulRun.of("the mean of these", input, output)


def test_a_rewrite_with_the_right_keys_and_wrong_values_is_not_served(tmp_path: Path, chat: ChatServer) -> None:
    """The test case and the failing input pass and every output has the parent's keys, but the
    rewrite answers an input the parent served, and answers again the same way, otherwise."""
    wrong = "def run(value):\n    return {'mean': 2.0}\n"
    chat.replies = [(200, f"Fixed.\n```python\n{wrong}```\n")]
    parent, evidence = code_parent(tmp_path)
    evidence = evidence.model_copy(update={"successes": [success({"mean": 5.0}, xs=[4, 6])]})
    proposal = propose(code_mutator(MutatorConfig(llm_url=chat.url)), parent, evidence)
    chat.stop()
    reproduced = reproduce_successes(parent, evidence, SANDBOX, CONFIG)
    assert [s.reproducible for s in reproduced.successes] == [True]
    (stages,) = verified(proposal, reproduced, tmp_path)
    assert stages[-1].stage == "replay" and not stages[-1].passed
    assert stages[-1].problems == ['successful input {"xs": [4, 6]}: output {"mean": 2.0} instead of the parent\'s {"mean": 5.0}']
    (right,) = verified(Proposal(candidates=[proposal.candidates[0].model_copy(update={"files": {"tool.py": FIXED.encode()}})]),
                        reproduced, tmp_path / "right")
    assert passed(right)


def test_a_tool_whose_answers_vary_is_held_to_the_shape_of_its_output(tmp_path: Path) -> None:
    """A parent that answers the same input otherwise when run again (here: a counter) is not
    deterministic there, so its candidates need only keep the output's shape."""
    parent = write_tool(tmp_path, "ticket", "import itertools\n_n = itertools.count(100)\ndef run(value):\n    return {'ticket': next(_n)}\n")
    evidence = Evidence(successes=[success({"ticket": 7}, who="ann"), SuccessfulRun(scenario="too big to keep", input={"who": "bob"},
                                                                                     shape=shape_of({"ticket": 1}))])
    reproduced = reproduce_successes(parent, evidence, SANDBOX, CONFIG)
    assert [s.reproducible for s in reproduced.successes] == [False, False]
    (stages,) = verified(Proposal(candidates=[CandidateVersion(mutator="code", mutation="same code", manifest=parent,
                                                            files=dict(read_parent(parent).files))]),
                         reproduced, tmp_path / "same")
    assert passed(stages)


def test_code_mutator_with_a_reply_without_code_proposes_nothing(tmp_path: Path, chat: ChatServer) -> None:
    chat.replies = [(200, "You should check whether the list is empty before dividing.")]
    parent, evidence = code_parent(tmp_path)
    proposal = propose(code_mutator(MutatorConfig(llm_url=chat.url)), parent, evidence)
    assert not proposal.candidates and "no usable code" in proposal.note


def test_code_mutator_stops_waiting_when_the_evolution_budget_is_spent(tmp_path: Path, chat: ChatServer) -> None:
    """FITTEST_LLM_TIMEOUT_S (here 20 s, retried) bounds one request; the evolution's budget bounds
    them all: a hanging endpoint costs the time left, not 3 x 20 s."""
    chat.delay_s = 5.0
    chat.replies = [(200, f"Fixed.\n```python\n{FIXED}```\n")] * 3
    mutator = code_mutator(MutatorConfig(llm_url=chat.url, llm_timeout_s=20))
    assert mutator is not None
    parent, evidence = code_parent(tmp_path)
    context = MutationContext(parent=read_parent(parent), evidence=evidence, version="1.1.0", trigger="call")
    started = time.monotonic()
    proposal = mutator.propose(context.model_copy(update={"deadline": started + 1.0}))
    assert time.monotonic() - started < 4.0
    assert not proposal.candidates and "FITTEST_EVOLUTION_BUDGET_S" in proposal.note
    spent = mutator.propose(context.model_copy(update={"deadline": time.monotonic() - 1}))
    assert not spent.candidates and "budget" in spent.note and len(chat.requests) == 1


def test_code_mutator_is_off_without_a_url() -> None:
    assert code_mutator(MutatorConfig()) is None


# ------------------------------------------------------------------------------------ hung candidates
EVIL = "import re\nEVIL = re.compile(r'^(a+)+$')\ndef run(value):\n    return {'ok': bool(EVIL.match(value['s']))}\n"


def test_a_candidate_that_hangs_is_killed_within_the_time_of_its_stage(tmp_path: Path) -> None:
    """Catastrophic regex backtracking runs in C holding the GIL: only killing its process stops it."""
    parent = write_tool(tmp_path, "evil", EVIL, timeout_s=5, test_cases=[{"input": {"s": "a" * 40 + "!"}, "expect": {"ok": False}}])
    proposal = propose(TimeoutMutator(MutatorConfig()), parent, Evidence(failures=[failing(FailureClass.timeout, s="a")]))
    assert proposal.candidates[0].manifest.timeout_s == 20
    staged = write_version(tmp_path / "c", proposal.candidates[0].manifest, proposal.candidates[0].files)
    started = time.monotonic()
    stages = verify(staged, Evidence(), SANDBOX, VerifyConfig(stage_timeout_s=4))
    assert time.monotonic() - started < 20  # static, then the tests stage cut to its 4 s
    assert stages[-1].stage == "tests" and not stages[-1].passed
    # Killed by the run's timeout, cut to the stage's time ("timeout: … process group killed"), or,
    # on a loaded host where the sandbox started late, by the stage's own kill ("the stage did not
    # finish within 4s; its process group was killed"; a clean-clone run saw it): killed either way.
    problem = stages[-1].problems[0]
    assert ("timeout" in problem and "process group killed" in problem) or problem.startswith("the stage did not finish within 4s"), problem


def test_a_candidate_that_hangs_at_import_is_killed_at_the_static_stage_timeout(tmp_path: Path) -> None:
    hang = "import re\nre.match(r'^(a+)+$', 'a' * 40 + '!')\ndef run(value):\n    return 1\n"
    parent = write_tool(tmp_path, "hangs_at_import", hang, timeout_s=1)
    proposal = propose(TimeoutMutator(MutatorConfig()), parent, Evidence(failures=[failing(FailureClass.timeout, s="a")]))
    staged = write_version(tmp_path / "c", proposal.candidates[0].manifest, proposal.candidates[0].files)
    stages = verify(staged, Evidence(), SANDBOX, VerifyConfig(static_timeout_s=3))
    assert [s.stage for s in stages] == ["static"] and not stages[0].passed
    assert stages[0].problems == ["the stage did not finish within 3s; its process group was killed"]


def test_the_sandbox_refuses_a_request_it_cannot_read_naming_the_field() -> None:
    """Its stdin protocol is a model: a run request without its inputs ended in `KeyError: 'inputs'`
    (code review 5); it is refused, naming what is missing, with exit code 2."""
    done = subprocess.run([sys.executable, "-m", "workers.sandbox"], input=json.dumps({"mode": "run", "manifest": {}, "tool_dir": "."}),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "the request is refused" in done.stderr, done.stderr
    assert "run.inputs" in done.stderr and "run.limits" in done.stderr and "Traceback" not in done.stderr
