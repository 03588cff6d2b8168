"""`fittest.feedback_report` and `fittest.recommend` check their payloads as the other tasks do: a
bad one gets the `invalid` reply (status, errors naming the fields, message) before any store is
read; and `fittest schema` publishes them, with `explain`'s reply."""

from __future__ import annotations

from typing import Any

import pytest

from selection.models import CallResult
from workers.payloads import ExplainResult, InvalidReply, payload_schemas
from workers.tasks.refusals import invalid_result


def no_runtime() -> Any:
    raise AssertionError("a refused payload read a store")


@pytest.mark.parametrize(("payload", "fields"), [
    ({"tool": "csv", "limit": -1}, {"limit"}),
    ({"tool": "csv", "limit": "many"}, {"limit"}),
    ({"limit": 5}, {"tool"}),
    ({"tool": "", "limit": 5, "version": "1.0.0"}, {"tool", "version"}),
    ({"tool": "csv", "per": "month"}, {"per"}),
])
def test_a_bad_feedback_report_payload_is_refused_naming_its_fields(monkeypatch: pytest.MonkeyPatch,
                                                                    payload: dict[str, Any], fields: set[str]) -> None:
    from workers.tasks import feedback

    monkeypatch.setattr(feedback, "runtime", no_runtime)
    reply = feedback.feedback_report_task.run(**payload)
    assert reply["status"] == "invalid" and {e["field"] for e in reply["errors"]} == fields, reply
    assert reply["message"] == f"invalid payload: {', '.join(sorted(fields))}"


@pytest.mark.parametrize(("payload", "fields"), [
    ({"min_runs": 0}, {"min_runs"}),
    ({"max_rate": 1.5}, {"max_rate"}),
    ({"max_rate": "half", "runs": 3}, {"max_rate", "runs"}),
])
def test_a_bad_recommend_payload_is_refused_naming_its_fields(monkeypatch: pytest.MonkeyPatch,
                                                              payload: dict[str, Any], fields: set[str]) -> None:
    from workers.tasks import learning

    monkeypatch.setattr(learning, "runtime", no_runtime)
    reply = learning.recommend.run(**payload)
    assert reply["status"] == "invalid" and {e["field"] for e in reply["errors"]} == fields, reply


def test_the_invalid_reply_has_the_shape_of_a_refused_calls_result() -> None:
    from pydantic import ValidationError

    from workers.payloads import RecommendRequest

    with pytest.raises(ValidationError) as caught:
        RecommendRequest.model_validate({"min_runs": -1})
    reply = InvalidReply.of(caught.value).model_dump(mode="json")
    call = invalid_result(caught.value)
    assert reply == {k: call[k] for k in reply}


def test_explain_reply_is_a_call_result_with_what_the_ranking_was_made_from() -> None:
    reply = ExplainResult(call_id="c1", status="success", context={"language": {"value": "python"}},
                          evidence_age_s=1.5, cache_ttl_s=30.0).model_dump(mode="json")
    assert CallResult.model_validate(reply).call_id == "c1"
    assert {"context", "evidence_age_s", "cache_ttl_s"} <= set(reply)


def test_schema_publishes_the_report_payloads_and_the_explain_reply() -> None:
    schemas = payload_schemas()
    assert set(schemas["feedback_report"]["properties"]) == {"tool", "limit", "per"}
    assert set(schemas["recommend"]["properties"]) == {"min_runs", "max_rate"}
    assert {"context", "evidence_age_s", "cache_ttl_s", "ranking"} <= set(schemas["explain_reply"]["properties"])
    assert schemas["invalid_reply"]["properties"]["status"]["const"] == "invalid"


def test_the_call_tool_schema_takes_its_name_or_its_namespace() -> None:
    """QA recheck N3: the schema required `name`, where the workers take `namespace` alone."""
    from workers.payloads import CallToolPayload

    schema = payload_schemas()["call_tool"]
    assert "name" not in schema.get("required", []) and schema["anyOf"] == [{"required": ["name"]}, {"required": ["namespace"]}]
    assert CallToolPayload.model_validate({"namespace": "slugify"}).name == "slugify"  # as the workers read it
    # ...and every field of a call's payload it takes too, and no other key (QA live F9)
    assert {"call_id", "tags", "context", "max_attempts", "min_similarity"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert list(schema["properties"])[:6] == ["name", "input", "version", "use_evolved", "scenario", "namespace"]
    # NAME@VERSION, as the workers take it (QA 55b L6: the schema's pattern refused it)
    import re

    pattern = schema["properties"]["name"]["pattern"]
    assert [bool(re.search(pattern, n)) for n in ("slugify", "slugify@1.2.0", "Slugify", "slugify@")] == [True, True, False, False]
    assert CallToolPayload.model_validate({"name": "slugify@1.2.0"}).version == "1.2.0"


def test_schema_publishes_every_answer_of_a_task_sent_by_name() -> None:
    """Review: `fittest evolve`'s task, and the reports of feedback_report, recommend and a retrain,
    had no schema, though a service sends them by name as the CLI does."""
    schemas = payload_schemas()
    assert set(schemas["prepare_evolution"]["properties"]) == {"namespace", "version", "reason"}
    assert {"status", "version", "mutation", "message"} <= set(schemas["prepare_evolution_reply"]["properties"])
    assert {"tool", "entries", "trend"} <= set(schemas["feedback_report_reply"]["properties"])
    assert "recommendations" in schemas["recommend_reply"]["properties"]
    assert {"changed", "version", "weights", "evidence"} <= set(schemas["retrain_weights_reply"]["properties"])


def test_an_evolution_asked_for_by_hand_without_a_namespace_is_answered_naming_it() -> None:
    from workers.tasks.evolution import prepare_evolution

    answer = prepare_evolution.run(namespace="", reason="by hand")
    assert (answer["status"], answer["trigger"]) == ("no_fix", "manual")
    assert answer["message"].startswith("evolution could not be prepared: namespace: "), answer["message"]
    # QA recheck L-C: an unknown key raised TypeError, a namespace that is no text a ValidationError
    # of the report itself; a missing one read as a wrong type.
    for asked, says in (({"namespace": "sort_numbers", "bogus": 1}, "bogus: Extra inputs are not permitted"),
                        ({"namespace": 123}, "namespace: Input should be a valid string"),
                        ({}, "namespace: Field required")):
        answer = prepare_evolution.run(**asked)
        assert answer["status"] == "no_fix" and says in answer["message"], answer


def test_a_request_begun_after_its_message_expired_is_dropped_and_marked_so() -> None:
    """Review 50: a `fittest evolve` (or a judgement) that waited in a busy thread pool past its
    message's expiry ran after its sender had said nothing was done, and a second one, sent as told,
    did it twice."""
    import datetime as dt
    from types import SimpleNamespace

    import pytest
    from celery.exceptions import Ignore

    from workers.tasks.expiry import drop_if_expired

    marked: list[tuple[str, str]] = []
    backend = SimpleNamespace(mark_as_revoked=lambda task_id, reason, request: marked.append((task_id, reason)))
    now = dt.datetime.now(dt.timezone.utc)

    def task(expires: object) -> SimpleNamespace:
        return SimpleNamespace(name="fittest.prepare_evolution", backend=backend,
                               request=SimpleNamespace(id="t-1", expires=expires))

    drop_if_expired(task(None))  # sent to be done whenever
    drop_if_expired(task((now + dt.timedelta(seconds=30)).isoformat()))  # in time
    assert marked == []
    with pytest.raises(Ignore):
        drop_if_expired(task((now - dt.timedelta(seconds=1)).isoformat()))
    assert marked == [("t-1", "expired")]  # `fittest result` tells it "expired"


def test_an_evolution_asked_for_by_hand_that_began_past_its_expiry_is_dropped_not_answered(monkeypatch) -> None:
    """Review 51 M1: the task's catch-all took the drop for a failure, logged its traceback and
    answered a no_fix report over the "expired" mark."""
    import datetime as dt

    import pytest
    from celery.exceptions import Ignore

    from workers.tasks.evolution import prepare_evolution

    marked: list[str] = []
    monkeypatch.setattr(prepare_evolution.backend, "mark_as_revoked", lambda task_id, reason, request: marked.append(reason))
    past = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)).isoformat()
    prepare_evolution.push_request(id="late-evolve", expires=past)
    try:
        with pytest.raises(Ignore):
            prepare_evolution.run(namespace="sort_numbers", reason="by hand")
    finally:
        prepare_evolution.pop_request()
    assert marked == ["expired"]


# What a foreign service may send by name, with the model the workers read it with.
def _requests() -> dict[str, Any]:
    from selection.models import CallRequest
    from workers.payloads import CallToolPayload, EvolveRequest, FeedbackReportRequest, FeedbackRequest, RecommendRequest

    return {"resilient_tool_call": CallRequest, "call_tool": CallToolPayload, "record_feedback": FeedbackRequest,
            "explain": CallRequest, "feedback_report": FeedbackReportRequest, "recommend": RecommendRequest,
            "prepare_evolution": EvolveRequest}


# A value of each JSON type the schema may name, and of the types that are no number or flag there.
WRONG_TYPES: dict[str, list[Any]] = {"integer": ["3", True, 2.0], "number": ["0.5", True], "boolean": ["no", "false", 1, 0]}


def test_the_workers_refuse_every_number_and_flag_the_schema_refuses() -> None:
    """QA 55b M4: `fittest schema` types `max_attempts` an integer, but the workers took "3", and
    `true` for one attempt; `use_evolved: "no"` for false; a judgement's `quality: "0.5"`. A service
    that checks its payloads against the schema and the workers now refuse the same ones, each
    naming the field."""
    from pydantic import ValidationError

    from selection.models import CallRequest

    schemas = payload_schemas()
    checked = []
    for task, model in _requests().items():
        base = {"resilient_tool_call": {"scenario": "sort"}, "explain": {"scenario": "sort"}, "call_tool": {"name": "sort"},
                "record_feedback": {"tool": "sort", "sentiment": "positive"}, "feedback_report": {"tool": "sort"},
                "recommend": {}, "prepare_evolution": {"namespace": "sort"}}[task]
        model.model_validate(base)
        for field, spec in schemas[task]["properties"].items():
            types = {spec.get("type")} | {alt.get("type") for alt in spec.get("anyOf", [])}
            for kind in types & set(WRONG_TYPES):
                # call_tool reads a call's fields as a call's payload, once the tool is named
                reader, given = (model, base) if field in model.model_fields else (CallRequest, {"scenario": "sort"})
                for value in WRONG_TYPES[kind]:
                    with pytest.raises(ValidationError, match=field):
                        reader.model_validate({**given, field: value})
                checked.append(f"{task}.{field}")
    assert {"resilient_tool_call.max_attempts", "resilient_tool_call.use_evolved", "resilient_tool_call.min_similarity",
            "call_tool.use_evolved", "call_tool.max_attempts", "record_feedback.quality", "feedback_report.limit", "recommend.max_rate"} <= set(checked)


def test_a_judgement_names_a_version_as_tool_at_version_as_the_client_and_the_cli_do() -> None:
    """QA 55b L6: `fittest.record_feedback` sent by name answered "no tool named 'count_vowels@1.0.0'",
    where the client and `fittest feedback add` take NAME@VERSION."""
    from pydantic import ValidationError

    from workers.payloads import FeedbackRequest

    judged = FeedbackRequest.model_validate({"tool": "count_vowels@1.0.0", "sentiment": "negative"})
    assert (judged.tool, judged.version) == ("count_vowels", "1.0.0")
    with pytest.raises(ValidationError, match="names version 1.0.0, and version '2.0.0' another"):
        FeedbackRequest.model_validate({"tool": "count_vowels@1.0.0", "version": "2.0.0", "sentiment": "negative"})


def test_the_call_schema_says_what_the_workers_check_of_context_versions_and_exclude() -> None:
    """QA 59a M2: payloads the published schema passed were refused by the workers: a phase
    misspelled, a complexity given as text or past 1, a version or an excluded key that is no
    semantic version, a blank scenario. The schema now carries each rule the workers apply."""
    import re

    from pydantic import ValidationError

    from selection.models import CallRequest

    call = payload_schemas()["resilient_tool_call"]["properties"]
    context = call["context"]["properties"]
    assert call["context"]["additionalProperties"] is True  # the caller's own keys pass
    for key in ("phase", "task_type", "testing"):
        (allowed,) = [alt["enum"] for alt in context[key]["anyOf"] if "enum" in alt]
        for value in allowed:
            CallRequest.model_validate({"scenario": "s", "context": {key: value}})
        with pytest.raises(ValidationError, match=f"context.{key}"):
            CallRequest.model_validate({"scenario": "s", "context": {key: allowed[0] + "x"}})
    (number,) = [alt for alt in context["complexity"]["anyOf"] if alt.get("type") == "number"]
    assert (number["minimum"], number["maximum"]) == (0.0, 1.0)
    assert {"languages", "language", "files", "environment"} <= set(context)

    version = next(alt["pattern"] for alt in call["version"]["anyOf"] if "pattern" in alt)
    excluded = call["exclude"]["items"]["pattern"]
    for text in ("1.2.0", "1.2.0-rc.1+b5", "1.2", "v1.2.0", "!!"):
        schema_takes = re.search(version, text) is not None
        try:
            CallRequest.model_validate({"scenario": "s", "namespace": "sort", "version": text})
            workers_take = True
        except ValidationError:
            workers_take = False
        assert schema_takes == workers_take, text
        assert re.search(excluded, f"sort@{text}") is not None  # any version, which the workers note when no tool has it
    assert re.search(excluded, "sort") is None  # a bare name, which the workers refuse
    assert re.search(call["scenario"]["pattern"], "   ") is None  # a blank scenario, which the workers refuse


def test_an_answer_schema_requires_every_field_an_answer_carries() -> None:
    """QA 60e N5: `{}` passed the `call_output` schema (read as payloads are, every field with a
    default optional). An answer carries them all; what the CLI prints of a call passes, and so does
    the error that ended a --json command before it had one."""
    import jsonschema

    from workers.payloads import CallWithoutResult, CommandError, RetrainResult

    schemas = payload_schemas()
    printed = [CallResult(call_id="c1", status="success", output={"n": 1}).model_dump(mode="json"),
               CallWithoutResult(call_id="c1", status="pending", message="still running").model_dump(mode="json"),
               InvalidReply(message="invalid payload: scenario").model_dump(mode="json"),
               CommandError(exit_code=1, message="cannot reach Redis").model_dump(mode="json")]
    for doc in printed:
        jsonschema.validate(doc, schemas["call_output"])
    for wrong in ({}, {"status": "invalid"}, {"status": "error", "message": "no exit code"}, {"call_id": "c1"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schemas["call_output"])
    jsonschema.validate(RetrainResult(changed=False, reason="r").model_dump(mode="json"), schemas["retrain_weights_reply"])
    with pytest.raises(jsonschema.ValidationError, match="'changed' is a required property"):
        jsonschema.validate({}, schemas["retrain_weights_reply"])
