"""The Python client for services that install fittest (`pip install fittest`).

    from fittest.client import FittestClient

    with FittestClient("redis://redis:6379/0") as fittest:
        result = fittest.run("convert 3 miles to km", input={"value": 3, "from": "mi", "to": "km"})
        if result.status == "success":
            print(result.output, "by", result.tool, result.version)
            # later, when the output turned out wrong:
            fittest.record_feedback(result.tool, "negative", version=result.version,
                                    scenario="convert 3 miles to km", reason="wrong factor")

It sends by task name and imports no task code, exactly as a service without fittest installed
would with Celery's `send_task` (see the README); what it adds is the payload validation before
sending, the record of each call as in flight once it is sent (so that the workers send it again
if the worker that took it off its queue is killed before recording it as taken) and the typed
`CallResult` after.
"""

from __future__ import annotations

from typing import Any, Self

from selection.manifest import tool_reference
from selection.models import CallRequest, CallResult, FieldError, Sentiment, joined_errors, size_errors
from workers.client import (CallRevoked, CallSender, CallTimeout, FittestUnavailable, MisroutedCall, NotACall, NotDone, PendingCall,
                            Refused, UnknownCall, UnreadableAnswer, checked_timeout, reaching, read_call, timed_out_as)
from workers.payloads import CallToolPayload, FeedbackReply, FeedbackRequest, RecordedFeedback, payload_schemas
from workers.settings import Settings, get_settings

__all__ = ["CallRequest", "CallResult", "CallRevoked", "CallTimeout", "CallToolPayload", "FeedbackReply", "FeedbackRequest", "FittestClient",
           "FittestUnavailable", "MisroutedCall", "NotACall", "NotDone", "RecordedFeedback", "Refused", "UnknownCall",
           "UnreadableAnswer",
           "payload_schemas"]


class FittestClient(CallSender):
    """Send `fittest.resilient_tool_call` / `fittest.call_tool` and get a `CallResult` back.

    `redis_url` is the broker (and the result backend unless `result_backend` is given); without
    either, the FITTEST_* settings of this process are used."""

    def __init__(self, redis_url: str | None = None, *, result_backend: str | None = None,
                 key_prefix: str | None = None, settings: Settings | None = None) -> None:
        """The other settings are read as the workers read theirs (FITTEST_*, or `settings`). The
        key prefix must be the workers' (FITTEST_KEY_PREFIX): the client records each call's first
        step in flight, and looks a call up, under it (QA integration M2: a client left at the
        default told `UnknownCall` of a call that was running, and its in-flight record went unread)."""
        settings = (settings or get_settings()).model_copy()
        given = {"redis_url": redis_url, "result_backend": result_backend} if redis_url is not None else {}
        if key_prefix is not None:
            given["key_prefix"] = key_prefix
        for name, value in given.items():  # checked as a setting is (QA 52a L8: "127.0.0.1:6521" failed only when used)
            Settings.__pydantic_validator__.validate_assignment(settings, name, value)
        super().__init__(settings)

    def submit(self, scenario: str, input: dict[str, Any] | None = None, **options: Any) -> PendingCall:
        """Enqueue a call and return at once; `result()` waits for it. The payload is checked
        here, so a bad field fails in the caller, not later in a worker; a `call_id` of your
        choosing names one job, and another job under it within 24 h raises ValueError."""
        request = CallRequest.model_validate({"scenario": scenario, "input": input or {}, **options})
        self._check_size(request)
        with reaching(self.settings.redis_url, "sending the call"):
            return self.send("resilient_tool_call", **request.model_dump(mode="json", exclude_unset=True))

    def submit_tool(self, name: str, input: dict[str, Any] | None = None, **options: Any) -> PendingCall:
        """Enqueue a call of namespace `name` (NAME@VERSION: that version; checked here, as the
        other options are): its promoted version, or the original, first; when
        every version of it fails, the tools its scenario (default: its description) matches are
        tried as fallbacks, so check `result.tool` before reading the output's shape; not when
        they refused the input (bad_input): the call then ends, failed."""
        payload = CallToolPayload.model_validate({"name": name, "input": input or {}, **options})
        # The other fields of a call (call_id, context, tags, max_attempts, ...) are checked as the
        # worker checks them, and sent: CallToolPayload ignores them (QA I: run_tool(..., call_id=...)
        # came back under another id, with the context, tags and max_attempts dropped).
        extra = [k for k in options if k not in CallToolPayload.model_fields]
        request = CallRequest.model_validate({**{k: options[k] for k in extra}, "input": payload.input,
                                              "scenario": payload.scenario or f"call {name}"})
        self._check_size(request)
        sent = {**payload.model_dump(mode="json", exclude_unset=True),
                **{k: v for k, v in request.model_dump(mode="json").items() if k in extra}}
        with reaching(self.settings.redis_url, "sending the call"):
            return self.send("call_tool", **sent)

    def _check_size(self, request: CallRequest) -> None:
        """Refuse here, as `fittest call` does, an input or context the workers would refuse as too
        large (QA I: a 3 MB input went through Redis to be refused by the selection worker)."""
        errors = size_errors(request, self.settings.input_limit_bytes)
        if errors:
            raise ValueError(joined_errors(errors))

    def result(self, pending: PendingCall | str, timeout: float | None = 120.0) -> CallResult:
        """The result of a call sent (`submit`'s AsyncResult, or its call id); CallTimeout when none
        came within `timeout` (a timeout of 0 or less: unless it is there already), and
        FittestUnavailable when Redis cannot be reached (either way the call itself goes on);
        UnknownCall (a LookupError), within a few seconds, when no call of that id is queued or
        running and no result of one is kept (results are kept for a day), NotACall (a
        LookupError too) for the id of another task (a judgement, an explain); UnreadableAnswer (a
        ValueError) for an answer this release cannot read (workers of another release: it holds
        the answer as stored), and CallRevoked (celery's TaskRevokedError) for a call revoked before
        it ended (a revoke without terminate does not stop a step a worker runs: the call's result,
        or the error its task raised, is then waited for, within `timeout`)."""
        timeout = checked_timeout(timeout)
        if isinstance(pending, str):
            pending = self.celery.AsyncResult(pending)
        with reaching(self.settings.backend_url, f"waiting for call {pending.id}"), timed_out_as(pending.id, timeout, lambda: self.whereabouts(pending.id)):
            answer = self.wait_past_revoke(pending, timeout)
        return read_call(pending.id, answer)

    def run(self, scenario: str, input: dict[str, Any] | None = None, timeout: float | None = 120.0,
            **options: Any) -> CallResult:
        """Call the fittest tool for `scenario` and wait for the result (`timeout` None: for ever);
        a bad `timeout` is refused before the call is sent."""
        timeout = checked_timeout(timeout)
        return self.result(self.submit(scenario, input, **options), timeout)

    def run_tool(self, name: str, input: dict[str, Any] | None = None, timeout: float | None = 120.0,
                 **options: Any) -> CallResult:
        """Call namespace `name` (other tools are fallbacks: `submit_tool`) and wait for the result."""
        timeout = checked_timeout(timeout)
        return self.result(self.submit_tool(name, input, **options), timeout)

    def cancel(self, call: PendingCall | str, *, terminate: bool = False) -> None:
        """Revoke a call (`submit`'s AsyncResult, or its call id): a step of it no worker has
        started is not run, and the call ends without a result (`result` raises CallRevoked). A
        step a worker runs goes on, and its result stands, unless `terminate`, which ends the
        process running it (QA 52a L4: there was no way but celery's own `revoke`). The call is
        marked revoked in the result backend here, as each worker that hears the revoke marks it:
        a worker started later reads the mark before it runs a step, also when none ran to hear it
        (a result already stored stays: celery does not mark a call that succeeded)."""
        call_id = call if isinstance(call, str) else call.id
        with reaching(self.settings.backend_url, f"cancelling call {call_id}"):
            # This client's record of the call in flight first, which it writes a moment after the
            # send: the worker that drops the revoked step ends the call, and counts it revoked,
            # only where it finds that record (QA 55a L1: 160 of 411 calls cancelled at once were
            # not counted, and their records, written after, stayed in flight until their due time).
            self._inflight.flush()
            self.celery.backend.mark_as_revoked(call_id, reason="revoked")
            self.celery.control.revoke(call_id, terminate=terminate)

    def record_feedback(self, tool: str, sentiment: Sentiment, *, version: str | None = None,
                        scenario: str | None = None, reason: str = "", quality: float = 1.0,
                        call_id: str | None = None, timeout: float = 30.0) -> RecordedFeedback:
        """Judge a tool version's work, e.g. the output of a call (`result.tool`, `result.version`,
        the call's scenario, `call_id=result.call_id`) that a person or a later check accepted or
        rejected. With `call_id` the judgement takes the place of the feedback the call's outcome
        gave the version on its own (a success is positive), whichever is stored first. Selection
        weighs it for similar scenarios, decayed with age, within ±50 points. Returns the feedback
        worker's answer (its `feedback` as stored, `score_now`: the version's feedback score for
        the judgement's scenario, and `first_now`: the version a call of that scenario most likely tries first now);
        raises Refused (a ValueError, its `errors` typed) for a payload or a tool the workers refuse, FittestUnavailable when a
        store they need to check it is down (sent again later, it is recorded), and NotDone (a
        TimeoutError, builtin and celery's) when no worker took it within `timeout`: it is then not
        recorded, ever (its message expires), and may be sent again."""
        named, given = tool_reference(tool)  # NAME@VERSION, as the CLI takes it (QA AC)
        if given is not None:
            if version is not None and version != given:  # QA AD: "no tool version 'NAME@1.0.0@2.0.0'"
                raise ValueError(f"version: given twice, as {tool!r} and version={version!r}: give one")
            tool, version = named, given
        request = FeedbackRequest.model_validate({"tool": tool, "sentiment": sentiment, "version": version,
                                                  "scenario": scenario, "reason": reason, "quality": quality,
                                                  "call_id": call_id})
        with reaching(self.settings.redis_url, "recording feedback"):
            answer = FeedbackReply.model_validate(
                self.ask_within("record_feedback", timeout, queue="feedback", **request.model_dump(mode="json")))
        if answer.status != "recorded" or answer.feedback is None:
            if answer.status == "unavailable":
                raise FittestUnavailable(joined_errors(answer.errors) or "not recorded (unavailable)")
            raise Refused(answer.errors or [FieldError(field="(payload)", message=f"not recorded ({answer.status})")])
        return RecordedFeedback(**{name: getattr(answer, name) for name in RecordedFeedback.model_fields})

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
