"""Hostile payloads against real workers: every bad call ends with an `invalid` result naming
what is wrong, and the workers stay up.

Hypothesis generates the payloads: a valid call with one to three fields broken (wrong types,
missing, huge, deeply nested, NaN or infinite, out of range, unknown), sent with `send_task` as
keyword or positional arguments, the way a foreign service would. They are sent as they are
generated and collected at the end, so a thousand of them take seconds, not minutes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.result import AsyncResult, ResultSet
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from selection.models import MAX_SCENARIO_CHARS
from tests.integration.conftest import TEST_TOOLS, Pipeline, pipeline_running

INPUT_LIMIT = 4096
EXAMPLES = 1000
CALL_ARGS = ("scenario", "input", "tags", "namespace", "max_attempts", "context")
VALID: dict[str, Any] = {
    "scenario": "parse csv text into rows",
    "input": {"text": "a,b\n1,2\n"},
    "tags": ["csv"],
    "namespace": "csv_lenient",
    "max_attempts": 2,
    "context": {"language": "python"},
}

# --------------------------------------------------------------------------- strategies
not_a_string = st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.lists(st.integers(), max_size=3),
                         st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
not_an_object = st.one_of(st.text(max_size=30), st.integers(), st.lists(st.text(max_size=5), max_size=3), st.booleans())
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
unicode_blank = st.text(alphabet=st.sampled_from(" \t\n\r\u00a0\u2003\u3000\u2028"), min_size=1, max_size=20)


def nested(depth: int, leaf: Any) -> Any:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


def with_bad(value: st.SearchStrategy[Any], where: st.SearchStrategy[str] = st.text(max_size=8)) -> st.SearchStrategy[dict[str, Any]]:
    """An object (input or context) with a bad value somewhere in it."""
    return st.builds(lambda key, v, extra: {**extra, key: v}, where, value,
                     st.dictionaries(st.text(max_size=6), st.text(max_size=20), max_size=3))


# field -> strategies of values that must be refused for it (None: the field is left out)
BREAKERS: dict[str, st.SearchStrategy[Any]] = {
    "scenario": st.one_of(st.none(), not_a_string, st.just(""), unicode_blank,
                          st.integers(MAX_SCENARIO_CHARS + 1, 60_000).map(lambda n: "é" * n)),
    "input": st.one_of(not_an_object, with_bad(non_finite),
                       st.integers(33, 120).map(lambda d: nested(d, "deep")),
                       st.builds(lambda v: {"unicode ✓": v}, non_finite)),
    "tags": st.one_of(st.text(min_size=1, max_size=10), st.integers(),
                      st.lists(not_a_string, min_size=1, max_size=3), st.lists(st.text(max_size=3), min_size=33, max_size=40)),
    "namespace": st.one_of(not_a_string, st.text(min_size=65, max_size=200)),
    "max_attempts": st.one_of(st.integers(max_value=0), st.integers(min_value=21), non_finite,
                              st.floats(0.1, 19.9).filter(lambda f: not f.is_integer()),
                              st.text(alphabet="abcxyz!", min_size=1, max_size=6), st.lists(st.integers(), max_size=2)),
    "context": st.one_of(not_an_object, with_bad(non_finite), st.integers(33, 80).map(lambda d: {"ctx": nested(d, 1)})),
    "use_evolved": st.one_of(st.text(alphabet="qwxz", min_size=2, max_size=5), st.lists(st.booleans(), max_size=2), st.floats(2, 9)),
    "call_id": st.one_of(st.text(alphabet=" /#?*é", min_size=1, max_size=10), st.text(min_size=129, max_size=200), not_a_string),
}
# a field nobody declared is refused by name too
UNKNOWN = st.from_regex(r"[a-z]{3,12}", fullmatch=True).filter(lambda k: k not in BREAKERS and k not in VALID
                                                                  and k not in ("version", "exclude", "after_evolution"))


@st.composite
def bad_calls(draw: st.DrawFn) -> tuple[list[Any], dict[str, Any], set[str]]:
    """(args, kwargs, fields that must be named in the result)."""
    kwargs = dict(VALID)
    expected: set[str] = set()
    if draw(st.integers(0, 9)) == 0:  # an input over FITTEST_INPUT_LIMIT_BYTES, alone: size is checked after the rest
        kwargs["input"] = {"text": draw(st.text(min_size=1, max_size=3)) * (INPUT_LIMIT + 1)}
        expected.add("input")
    else:
        for field in draw(st.sets(st.sampled_from(sorted(BREAKERS)), min_size=1, max_size=3)):
            value = draw(BREAKERS[field])
            if value is None:
                if field == "scenario":
                    kwargs.pop(field)
                    expected.add(field)
                continue
            kwargs[field] = value
            expected.add(field)
        if draw(st.booleans()) and draw(st.integers(0, 3)) == 0:
            unknown = draw(UNKNOWN)
            kwargs[unknown] = draw(st.text(max_size=10))
            expected.add(unknown)
    if not expected:  # every drawn breaker was "leave it out" on an optional field
        kwargs["max_attempts"] = -1
        expected.add("max_attempts")
    if draw(st.integers(0, 4)) == 0 and "scenario" in kwargs:  # positional, as send_task(args=[...]) sends them
        n = draw(st.integers(1, len(CALL_ARGS)))
        args = [kwargs.pop(name) for name in CALL_ARGS[:n] if name in kwargs]
        if len(args) == n:
            if draw(st.integers(0, 3)) == 0:  # one of them given again as a keyword (QA 49: the keyword won)
                again = draw(st.sampled_from(CALL_ARGS[:n]))
                kwargs[again] = args[CALL_ARGS.index(again)]
                expected.add(again)
            elif n == len(CALL_ARGS) and draw(st.integers(0, 1)) == 0:  # more than a call takes; the rest still read
                args.append(draw(st.integers()))
                expected.add("args")
            return args, kwargs, expected
        kwargs.update(zip(CALL_ARGS, args))  # a field was left out: back to keywords
    return [], kwargs, expected


# --------------------------------------------------------------------------- the test
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    with pipeline_running(tmp_path_factory.mktemp("bad_input"), redis_url, model_path, TEST_TOOLS,
                          roles=("memory", "executor"), FITTEST_INPUT_LIMIT_BYTES=str(INPUT_LIMIT)) as p:
        yield p


def collect(results: list[AsyncResult], timeout: float) -> list[Any]:
    values = ResultSet(results).get(timeout=timeout)
    for r in results:
        r.backend.remove_pending_result(r)
        r.backend = None
    return values


def named(result: dict[str, Any], field: str) -> bool:
    return any(e["field"] == field or e["field"].startswith(field + ".") for e in result["errors"]) and field in result["message"]


def test_a_thousand_hostile_payloads_each_get_an_invalid_result(pipeline: Pipeline) -> None:
    p = pipeline
    sent: list[tuple[list[Any], dict[str, Any], set[str], AsyncResult]] = []

    @settings(max_examples=EXAMPLES, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(bad_calls())
    def send(call: tuple[list[Any], dict[str, Any], set[str]]) -> None:
        args, kwargs, expected = call
        result = p.client.celery.send_task("fittest.resilient_tool_call", args=args, kwargs=kwargs, queue="selection")
        sent.append((args, kwargs, expected, result))

    send()
    assert len(sent) >= EXAMPLES
    results = collect([r for *_, r in sent], timeout=240)

    wrong = []
    for (args, kwargs, expected, _), result in zip(sent, results):
        if result.get("status") != "invalid" or not all(named(result, f) for f in expected):
            wrong.append((args, kwargs, expected, result))
    assert not wrong, json.dumps([[a, k, sorted(e), r] for a, k, e, r in wrong[:3]], default=str)[:4000]

    assert all(proc.poll() is None for proc in p.stack.procs.values())
    p.stack.wait_for_workers(["memory", "executor"], timeout=30)
    good = p.call(**VALID)
    assert good["status"] == "success" and good["output"] == [{"a": "1", "b": "2"}]


def test_input_at_the_limit_runs_one_byte_more_is_refused_with_the_limit_named(pipeline: Pipeline) -> None:
    call = {"scenario": "show which argv the program gets", "namespace": "echo_args", "max_attempts": 1}
    overhead = len(json.dumps({"text": ""}).encode())
    fits = p_call(pipeline, call, {"text": "x" * (INPUT_LIMIT - overhead)})
    assert fits["status"] == "success", fits
    refused = p_call(pipeline, call, {"text": "x" * (INPUT_LIMIT - overhead + 1)})
    assert refused["status"] == "invalid"
    (error,) = refused["errors"]
    assert error["field"] == "input" and f"the limit is {INPUT_LIMIT:,}" in error["message"]
    assert "FITTEST_INPUT_LIMIT_BYTES" in error["message"]
    assert refused["scenario"] == call["scenario"]


def test_scenario_over_the_limit_is_refused_naming_it(pipeline: Pipeline) -> None:
    refused = pipeline.client.wait(pipeline.client.send("resilient_tool_call", scenario="x" * (MAX_SCENARIO_CHARS + 1)), 30)
    assert refused["status"] == "invalid"
    assert [e["field"] for e in refused["errors"]] == ["scenario"]
    assert str(MAX_SCENARIO_CHARS) in refused["errors"][0]["message"]
    assert refused["scenario"] == "", "a scenario no call could run is not echoed back"


def p_call(p: Pipeline, call: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    return p.client.wait(p.client.send("resilient_tool_call", input=input, **call), 60)


def test_too_many_positional_arguments_are_named_and_those_taken_are_read(pipeline: Pipeline) -> None:
    """QA 49 recheck N5: with one positional argument too many, the call was told "scenario: Field
    required", of a scenario it had given."""
    sent = pipeline.client.celery.send_task("fittest.resilient_tool_call", queue="selection",
                                            args=["parse csv text into rows", {"text": "a"}, [], None, 2, {}, 99])
    result = collect([sent], timeout=60)[0]
    assert result["status"] == "invalid", result
    assert [(e["field"], e["message"]) for e in result["errors"]] == [
        ("args", "7 positional arguments; it takes at most 6 (scenario, input, tags, namespace, max_attempts, context)")], result
    assert result["scenario"] == "parse csv text into rows", "the refusal says which call it was"
