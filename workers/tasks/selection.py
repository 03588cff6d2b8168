"""The `selection` queue: validate a call, rank its candidates, hand it to execution."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from celery import Task
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.signals import worker_ready
from pydantic import ValidationError

from evolution.models import ChangelogEntry
from evolution.ports import EvolutionLedger
from evolution.promotions import note_newcomers, trial_new_manifests, unseen_versions
from selection.call_endings import no_candidates_result
from selection.manifest import ToolManifest, split_key
from selection.models import CallEvolution, CallPlan, CallRequest, CallResult, FieldError, field_errors
from workers.app import app
from workers.call_ends import ended_early, no_candidates
from workers.feedback_store import apply_stored_judgements
from workers.payloads import CallToolPayload, ExplainResult
from workers.rescue import CallStep, hand_on
from workers.runtime import runtime
from workers.tasks.call_id_claims import claim_call_id
from workers.tasks.execution import code_gone
from workers.tasks.refusals import given_scenario, invalid_result, refusal, result_call_id
from workers.tool_watch import ToolsDirWatch, watch_in_background


log = logging.getLogger("fittest.selection")


@worker_ready.connect
def warm_up(sender: Any = None, **_: Any) -> None:
    """A worker that serves the selection queue in its own process (the memory role's threads)
    loads the embedding model and indexes the tools as it starts, rather than in its first call:
    ~1 s for the example tools, and at a first start with 10,000 tools every description to embed.
    It runs beside the worker, so calls that arrive meanwhile wait for it as the first call did
    before, and `fittest health` counts the tools' vectors before any call. Then it watches the
    tools directory for manifests added, changed or removed (workers/tool_watch.py), and puts a
    version that a manifest newly gives its tool on trial (evolution/promotions.py
    `trial_new_manifests`), and a tool new to the system on its newcomer's trial (`note_newcomers`),
    at the start for what came while no worker watched."""
    app_ = getattr(sender, "app", None)
    if app_ is None or "selection" not in app_.amqp.queues.consume_from or isinstance(getattr(sender, "pool", None), PreforkPool):
        return

    def warm() -> None:
        try:
            rt = runtime()
            # What every task opens first is opened before the selector, whose build holds the
            # runtime's lock for a second or more, so that tasks need not wait for it.
            for opened in ("redis", "state", "inflight", "metrics", "evolution", "learning", "selector"):
                getattr(rt, opened)
        except Exception:  # the first call tries again, and reports what fails
            log.warning("selection warm-up failed; the first call will try again", exc_info=True)
        try:
            rt = runtime()
            namespaces = rt.registry.namespaces()
            # an evolved version a start no longer serves (its tool version left while no worker watched) ends its promotion too
            served_anew(namespaces, arrived=unseen_versions(rt.state, rt.registry, namespaces), removed=rt.registry.orphaned)
        except Exception:  # Redis away: the next version the watch serves looks again
            log.warning("could not look for new tools and manifest versions to put on trial", exc_info=True)
        try:  # judgements an earlier release stored did not flag or mark what they judged
            apply_stored_judgements(runtime().memory, runtime().state)
        except Exception:  # the store is down: judgements still replace outcomes near their scenario
            log.warning("could not apply the judgements stored before this release", exc_info=True)
        settings = runtime().settings

        def revise(changed: list[tuple[ToolManifest, Path]], removed: dict[str, str]) -> None:
            runtime().selector.index.revise_tools(changed, list(removed))
            if removed:  # its removal logged, then a removed version's trial or promotion ends (evolution/promotions.py)
                try:
                    log_watched(runtime().evolution, "removed", removed)
                    served_anew((split_key(key)[0] for key in removed), removed=removed)
                except Exception:  # Redis away: the next start looks again
                    log.warning("could not end the promotions of the versions no longer served", exc_info=True)

        if settings.tools_rescan_s > 0:  # a selector that failed to build is built again by the first look
            watch = ToolsDirWatch(settings.tools_dir, runtime().registry, lambda found: runtime().selector.index.ensure_tools(found),
                                  revise)

            def arrived(keys: list[str]) -> None:
                # The history first, as it happened (`show` listed a new manifest version's trial
                # above its arrival); a line Redis did not take does not keep the trial from starting.
                try:
                    log_watched(runtime().evolution, "added", {key: f"served from {runtime().registry.source(key)}" for key in keys})
                except Exception:
                    log.warning("could not log the versions the tools watch began serving", exc_info=True)
                served_anew((split_key(key)[0] for key in keys), arrived=keys)

            watch_in_background(watch, settings.tools_rescan_s, then=arrived)

    threading.Thread(target=warm, name="fittest-warm-up", daemon=True).start()


def log_watched(ledger: EvolutionLedger, event: Literal["added", "removed"], reasons: Mapping[str, str]) -> None:
    """A changelog line per version (key -> why) the tools watch began or stopped serving: a tool's
    history stays readable in `fittest show` once nothing of it is served (QA 50d F10: the removal
    was in no changelog, and `show` said there was no such tool), and one put back after its
    removal has both lines (QA 51d: `removed` twice, with nothing between)."""
    for key, why in reasons.items():
        name, version = split_key(key)
        # Each memory worker's watch sees the change (several beside a Qdrant server): logged once,
        # under its place among the version's comings and goings, which the first's line leaves as
        # it was (an addition follows as many removals as came before it, and the other way round).
        before = sum(e.event == ("removed" if event == "added" else "added") and e.version == version
                     for e in ledger.changelog(name))
        ledger.log(ChangelogEntry(namespace=name, event=event, version=version, reason=why),
                   once=f"watched:{name}:{version}:{event}:{before}")


def served_anew(namespaces: Iterable[str], arrived: Collection[str] = (), removed: Collection[str] = ()) -> None:
    """What a version newly served starts: a trial of a manifest's new version against what its
    namespace served, and for a tool new to the running system, its newcomer's trial. Called for
    the namespaces of removed versions too: a removed manifest version's promotion ends first.
    `arrived`: the keys the tools watch just served; at the start, the versions that never ran
    beside one that did (evolution/promotions.py `unseen_versions`); `removed`: the keys it just
    stopped serving."""
    rt = runtime()
    trial_new_manifests(rt.state, rt.evolution, rt.registry, namespaces, arrived, removed)
    note_newcomers(rt.state, rt.registry, arrived)


# Positional arguments of fittest.resilient_tool_call, in order (send_task(args=[...]) works too).
CALL_ARGS = ("scenario", "input", "tags", "namespace", "max_attempts", "context")
TOOL_ARGS = ("name", "input", "version", "use_evolved")


def _payload(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...]) -> tuple[dict[str, Any], list[FieldError]]:
    """The fields of a payload sent with positional arguments (`names`, in order) and keywords, and
    the arguments refused as Python refuses them: more than it takes, or one given both ways (QA 49:
    the keyword's value won without a word, and too many positional arguments were told as
    "scenario: Field required", of a scenario given)."""
    errors = [FieldError(field=name, type="given_twice",
                         message=f"given both as positional argument {i + 1} and as a keyword: give it once")
              for i, name in enumerate(names[:len(args)]) if name in kwargs]
    if len(args) > len(names):
        errors.append(FieldError(field="args", type="too_many_positional_arguments",
                                 message=f"{len(args)} positional arguments; it takes at most {len(names)} "
                                         f"({', '.join(names)})"))
    return {**dict(zip(names, args)), **kwargs}, errors


def start_call(task: Task, request: CallRequest, evolution: CallEvolution | None = None) -> Any:
    """Rank the candidates and replace this task with the first attempt (or end the call)."""
    from workers.tasks.execution import execute

    plan = runtime().selector.plan(request)
    if evolution is not None:  # the retry of a call after its evolution reports it, and is timed from the call's start
        plan.evolved, plan.evolution_report = True, evolution
        plan.started_at = evolution.call_started_at or plan.started_at
    runtime().metrics.selection(plan.policy, found=bool(plan.candidates), degraded=bool(plan.degraded))
    log_ranking(plan)
    if not plan.candidates:
        return no_candidates(plan)
    return hand_on(task, execute.si(plan.model_dump(mode="json"), 0))


def log_ranking(plan: CallPlan) -> None:
    """One line per ranking, so that a call can be followed from its selection in the memory
    worker's log, by `call_id`, to its attempts in the executor's (QA ops: only the attempts were
    logged; what was ranked, and what was held back by its breaker, was in the caller's result only)."""
    shown = ", ".join(f"{c.key} ({c.score:.2f})" for c in plan.candidates[:5])
    more = f" and {len(plan.candidates) - 5} more" if len(plan.candidates) > 5 else ""
    held = f"; held back by their breaker: {', '.join(plan.held_back)}" if plan.held_back else ""
    log.info("call %s ranked %s%s%s", plan.request.call_id, shown or "nothing", more, held, extra={
        "event": "ranking", "call_id": plan.request.call_id, "policy": plan.policy,
        "candidates": [c.key for c in plan.candidates], "held_back": plan.held_back, "degraded": plan.degraded,
        "namespace": plan.request.namespace})


@app.task(bind=True, base=CallStep, name="fittest.resilient_tool_call")
def resilient_tool_call(self: Task, *args: Any, **kwargs: Any) -> Any:
    """Run the fittest tool for `scenario` on `input`, falling back and evolving as needed.

    `evolution_report` is passed by fittest itself when it retries a call after evolving."""
    evolution_report = kwargs.pop("evolution_report", None)
    payload, refused = _payload(args, kwargs, CALL_ARGS)
    # fittest's own retry after an evolution re-sends the call as its request, not as it was sent.
    if evolution_report is None and (taken := claim_call_id(self, "resilient_tool_call", payload)) is not None:
        return taken
    try:
        request = CallRequest.model_validate(payload)
    except ValidationError as exc:
        return ended_early(invalid_result(refused + field_errors(exc), result_call_id(payload, self.request.id),
                                          given_scenario(payload)))
    if not kwargs.get("call_id") and self.request.id:
        request = request.model_copy(update={"call_id": self.request.id})
    if (refused_call := refusal(request, runtime().settings.input_limit_bytes, refused)) is not None:
        return ended_early(refused_call)
    try:
        evolution = None if evolution_report is None else CallEvolution.model_validate(evolution_report)
    except ValidationError as exc:  # named as the payload's field it is, like the request's own
        errors = [e.model_copy(update={"field": "evolution_report" + ("" if e.field == "(payload)" else "." + e.field)})
                  for e in field_errors(exc)]
        return ended_early(invalid_result(errors, request.call_id, request.scenario))
    return start_call(self, request, evolution)


@app.task(bind=True, base=CallStep, name="fittest.call_tool")
def call_tool(self: Task, *args: Any, **kwargs: Any) -> Any:
    """Call a namespace by name: its promoted version, or the original, or an explicit version."""
    payload, refused = _payload(args, kwargs, TOOL_ARGS)
    if (taken := claim_call_id(self, "call_tool", payload)) is not None:
        return taken
    try:  # as fittest's client checks it before sending; the rest is checked as a call's
        tool = CallToolPayload.model_validate(payload)
    except ValidationError as exc:
        # with the keys neither payload has, which a call's check names once the tool is named
        # (QA ops L1: `{"tool": …}` was told only that `name` is required)
        unknown = [FieldError(field=key, message="Extra inputs are not permitted", type="extra_forbidden")
                   for key in payload if key not in CallToolPayload.model_fields and key not in CallRequest.model_fields]
        return ended_early(invalid_result(refused + field_errors(exc) + unknown, result_call_id(payload, self.request.id),
                                          given_scenario(payload)))
    name = tool.name
    payload.pop("name", None)
    payload.pop("namespace", None)
    payload.pop("scenario", None)
    if tool.version is not None:  # NAME@VERSION names it too
        payload["version"] = tool.version
    original = runtime().registry.original(name)
    scenario = tool.scenario or (original.description.strip() if original else f"call {name}")
    try:
        request = CallRequest.model_validate(
            {**payload, "namespace": name, "scenario": scenario, "call_id": payload.get("call_id") or self.request.id}
        )
    except ValidationError as exc:
        return ended_early(invalid_result(refused + field_errors(exc), result_call_id(payload, self.request.id),
                                          given_scenario({"scenario": scenario})))
    if (refused_call := refusal(request, runtime().settings.input_limit_bytes, refused)) is not None:
        return ended_early(refused_call)
    if original is None:
        return ended_early(CallResult(
            call_id=request.call_id, status="no_candidates", scenario=request.scenario,
            message=f"no tool named '{name}'" + (f": {told}" if (told := runtime().selector.removal(name)
                                                               or runtime().registry.did_you_mean(name)) else ""),
            no_candidates_reason="no_such_tool",
        ).model_dump(mode="json"))
    return start_call(self, request)


@app.task(bind=True, name="fittest.explain")
def explain(self: Task, **kwargs: Any) -> dict[str, Any]:
    """The ranking a call would get, with every component, without running anything: an
    ExplainResult (workers/payloads.py), or a refused call's result, under the id it was sent with
    (QA 59a L1: its `call_id` read "invalid")."""
    try:
        request = CallRequest.model_validate(kwargs)
    except ValidationError as exc:
        return invalid_result(exc, result_call_id(kwargs, self.request.id), given_scenario(kwargs))
    if (too_large := refusal(request, runtime().settings.input_limit_bytes)) is not None:
        return too_large  # refused as the call would be (QA: explain ranked what a call refused)
    plan: CallPlan = runtime().selector.plan(request)
    # With the note a call gets of the versions whose code is not there to run (QA 49: explain ranked
    # first a tool of a tools directory moved away, and said nothing of it).
    code_gone(plan)
    # Its status is the one a call would end with when nothing is ranked (QA AC: "success").
    result = (CallResult.from_plan(plan, "success", message="ranking only; nothing was run") if plan.candidates
              else no_candidates_result(plan, runtime().registry, runtime().settings.tools_dir))
    # With the context as analysed (selection/context.py: each value and where it came from), which
    # a call's result leaves out: the SPARC column is read against it; and how old the cached
    # searches it ranked by are, as a call now would rank (QA AD).
    return ExplainResult.model_validate({
        **dict(result), "context": plan.features, "evidence_age_s": plan.evidence_age_s,
        "cache_ttl_s": runtime().settings.selection_cache_ttl_s,
    }).model_dump(mode="json")
