"""`fittest bench evolution`: deliberately broken tools, calls that fail on them, and what evolution
makes of them, on real workers.

The suite is `examples/broken/` (its `bench_calls.json` lists each tool's calls). On a private
stack (its own redis-server and data directory, `data_dir/bench-evolution/<run>/`, where the
evolved files and the workers' logs stay for inspection; the memory, executor and evolver workers;
the flaky HTTP upstream) the bench:

1. before: sends every bench call with evolution held back (`after_evolution`), judged strictly:
   a call counts as a success only if it ends served by the tool it is meant for, with an output
   that satisfies its `expect` / `expect_keys`;
2. history: sends calls that teach fittest the tools' successful scenarios and inputs (what the
   description mutator and the replay stage use; the learning policy learns from them too);
3. evolve: starts each tool's evolution as a user would meet it: its first failing call (the
   call path), or `fittest evolve` for a tool whose fault is its description;
4. after: sends every bench call again, as ordinary calls;
5. checks every promoted version against its parent on the same calls, by explicit version.

`broken` counts calls that failed before, `fixed` those of them that succeed after; a promoted
version that succeeds less often than its parent is a false promotion; an unfixable tool is
reported when its calls end with a failed result carrying a no_fix report (never a loop of
evolutions). Evolutions, rollbacks and `mean_evolve_s` come from the namespaces' changelogs: every
evolution of the run counts, including those a falling quality started off the call path.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from selection.manifest import TestCase
from selection.models import CallResult
from workers.bench.host import BenchResult
from workers.settings import Settings
from workers.stack import ROOT, Stack, start_private_redis

if TYPE_CHECKING:
    from evolution.models import EvolutionReport
    from evolution.ports import Changelog
    from selection.ports import StateStore
    from workers.client import CallSender

SUITE_DIR = ROOT / "examples" / "broken"
ROLES = ("memory", "executor", "evolver")
FLAKY_PORT_ENV = "FITTEST_BROKEN_HTTP_PORT"
CALL_TIMEOUT_S = 600.0
MAX_ATTEMPTS = 3


class BenchCall(BaseModel):
    scenario: str
    input: dict[str, Any]
    namespace: str | None = None
    expect_tool: str | None = None  # for a call by scenario only: the tool that should serve it
    expect: Any = None
    expect_keys: list[str] = Field(default_factory=list)

    def tool(self) -> str:
        return self.expect_tool or self.namespace or ""

    def payload(self, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"scenario": self.scenario, "input": self.input, "max_attempts": MAX_ATTEMPTS, **extra}
        if self.namespace:
            body["namespace"] = self.namespace
        return body

    def judge(self, result: CallResult) -> bool:
        if result.status != "success" or result.tool != self.tool():
            return False
        case = TestCase(input=self.input, expect=self.expect, expect_keys=self.expect_keys)
        return case.check(True, result.output) is None


class BrokenTool(BaseModel):
    name: str
    trigger: Literal["call", "manual"]
    fixable: bool
    history: list[BenchCall] = Field(default_factory=list)
    calls: list[BenchCall]


class Suite(BaseModel):
    tools: list[BrokenTool]


class Event(BaseModel):
    """One changelog entry, as the bench reports it."""

    event: str
    version: str | None = None
    trigger: str = ""
    mutation: str = ""
    reason: str = ""
    elapsed_s: float | None = None


class ToolOutcome(BaseModel):
    name: str
    fixable: bool
    trigger: str
    calls: int
    failed_before: int
    fixed: int
    evolution_status: str | None = None  # of the evolution the bench started (or that started first)
    version: str | None = None
    mutation: str | None = None
    message: str = ""
    evolutions_per_call_after: list[int] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)  # the namespace's changelog
    parent_successes: int | None = None  # on the bench calls, by explicit version
    evolved_successes: int | None = None
    false_promotion: bool = False
    rollbacks: int = 0
    reported: bool | None = None  # unfixable tools: ended with a clear report, not a loop

    @property
    def evolve_s(self) -> float | None:
        """How long the tool's first evolution took."""
        return next((e.elapsed_s for e in self.events if e.event in ("promoted", "no_fix")), None)


class EvolutionBench(BenchResult):
    tools: int
    calls: int
    broken: int
    fixed: int
    false_promotions: int
    rollbacks: int
    unfixable_tools: int
    unfixable_reported: int
    evolutions: int
    mean_evolve_s: float | None
    elapsed_s: float
    per_tool: list[ToolOutcome]


def load_suite(path: Path = SUITE_DIR / "bench_calls.json") -> Suite:
    return Suite.model_validate(json.loads(path.read_text()))


def bench_settings(settings: Settings, run: str) -> Settings:
    """Files of this run only, and the suite's tools."""
    return settings.model_copy(update={
        "data_dir": (settings.data_dir / "bench-evolution" / run).resolve(),
        "tools_dir": SUITE_DIR,
        "result_backend": None,
    })


def _evolution_count(result: CallResult) -> int:
    return 1 if result.evolution is not None and result.evolution.status != "disabled" else 0


def run_evolution_bench(settings: Settings, progress: Callable[[str], None] = lambda _: None) -> EvolutionBench:
    from workers.client import CallSender
    from workers.redis_connection import redis_client
    from workers.state import open_state_store
    from workers.state.evolution import EvolutionState

    started = time.monotonic()
    suite = load_suite()
    settings = bench_settings(settings, uuid.uuid4().hex[:8])
    progress(f"starting a private redis-server, the flaky upstream and the workers (files in {settings.data_dir})")
    redis_proc, url = start_private_redis(settings.data_dir)
    settings = settings.model_copy(update={"redis_url": url})
    env = {"FITTEST_REDIS_URL": url, "FITTEST_DATA_DIR": str(settings.data_dir), "FITTEST_TOOLS_DIR": str(SUITE_DIR)}
    if settings.embedding_model_path:
        env["FITTEST_EMBEDDING_MODEL_PATH"] = str(Path(settings.embedding_model_path).resolve())
    with Stack(settings, env=env, log_dir=settings.data_dir / "logs") as stack:
        stack.procs["redis"] = redis_proc
        stack.start("flaky_upstream", [sys.executable, str(SUITE_DIR / "flaky_server.py")])
        stack.start_roles(ROLES)
        stack.wait_for_workers(ROLES, timeout=180)
        client = CallSender(settings)
        ledger = EvolutionState(redis_client(settings), settings.key_prefix)
        outcomes = _run(suite, client, open_state_store(settings), ledger, progress)
    shutil.rmtree(settings.data_dir / "qdrant", ignore_errors=True)  # the evolved files and logs stay
    evolve_times = [e.elapsed_s for o in outcomes for e in o.events if e.event in ("promoted", "no_fix") and e.elapsed_s is not None]
    unfixable = [o for o in outcomes if not o.fixable]
    return EvolutionBench(
        tools=len(outcomes),
        calls=sum(o.calls for o in outcomes),
        broken=sum(o.failed_before for o in outcomes),
        fixed=sum(o.fixed for o in outcomes),
        false_promotions=sum(o.false_promotion for o in outcomes),
        rollbacks=sum(o.rollbacks for o in outcomes),
        unfixable_tools=len(unfixable),
        unfixable_reported=sum(bool(o.reported) for o in unfixable),
        evolutions=len(evolve_times),
        mean_evolve_s=round(statistics.fmean(evolve_times), 3) if evolve_times else None,
        elapsed_s=round(time.monotonic() - started, 1),
        per_tool=outcomes,
    )


def _call(client: CallSender, call: BenchCall, **extra: Any) -> CallResult:
    return _answer(client, client.send("resilient_tool_call", **call.payload(**extra)))


def _answer(client: CallSender, handle: Any) -> CallResult:
    """The call's result as the workers stored it, read as the client reads it."""
    from workers.client import read_call

    return read_call(handle.id, client.wait(handle, CALL_TIMEOUT_S))


def _run(suite: Suite, client: CallSender, state: StateStore, ledger: Changelog, progress: Callable[[str], None]) -> list[ToolOutcome]:
    progress("before: every bench call, evolution held back")
    before = {t.name: [call.judge(_call(client, call, after_evolution=True)) for call in t.calls] for t in suite.tools}

    progress("history: calls that succeed teach fittest the tools' scenarios and inputs")
    for tool in suite.tools:
        for call in tool.history:
            _call(client, call, after_evolution=True)

    outcomes: list[ToolOutcome] = []
    for tool in suite.tools:
        progress(f"evolve: {tool.name} ({'its first failing call' if tool.trigger == 'call' else 'fittest evolve'})")
        outcome = ToolOutcome(name=tool.name, fixable=tool.fixable, trigger=tool.trigger, calls=len(tool.calls),
                              failed_before=before[tool.name].count(False), fixed=0)
        report = _trigger(client, tool)
        if report is not None:
            outcome.evolution_status, outcome.version = report.status, report.version
            outcome.mutation, outcome.message = report.mutation, report.message
        outcomes.append(outcome)

    progress("after: every bench call again, as ordinary calls")
    for tool, outcome in zip(suite.tools, outcomes):
        for call, ok_before in zip(tool.calls, before[tool.name]):
            result = _call(client, call)
            outcome.evolutions_per_call_after.append(_evolution_count(result))
            if not ok_before and call.judge(result):
                outcome.fixed += 1

    progress("checking every promoted version against its parent on the same calls")
    for tool, outcome in zip(suite.tools, outcomes):
        promoted = [p for p in state.promotion_history(tool.name) if p.status == "on_trial"]
        for p in promoted[:1]:
            parent = p.parent_version or p.original_version
            outcome.parent_successes = sum(_by_version(client, call, tool.name, parent) for call in tool.calls)
            outcome.evolved_successes = sum(_by_version(client, call, tool.name, p.evolved_version) for call in tool.calls)
            outcome.false_promotion = outcome.evolved_successes < outcome.parent_successes
        outcome.events = [Event(event=e.event, version=e.version, trigger=e.trigger, mutation=e.mutation, reason=e.reason[:300],
                                elapsed_s=e.elapsed_s) for e in ledger.changelog(tool.name)]
        outcome.rollbacks = sum(e.event == "rolled_back" for e in outcome.events)
        first = next((e for e in outcome.events if e.event in ("promoted", "no_fix")), None)
        if outcome.evolution_status is None and first is not None:  # evolved before the bench asked (quality)
            outcome.evolution_status = "evolved" if first.event == "promoted" else "no_fix"
            outcome.version, outcome.mutation, outcome.message = first.version, first.mutation, first.reason
            outcome.trigger = first.trigger
        if not tool.fixable:
            outcome.reported = outcome.evolution_status == "no_fix" and bool(outcome.message) and outcome.fixed == 0 \
                and all(n <= 1 for n in outcome.evolutions_per_call_after)
    return outcomes


def _trigger(client: CallSender, tool: BrokenTool) -> EvolutionReport | None:
    """Start the tool's evolution; its report (None when no call failed, so nothing evolved). A
    call's result carries the whole report (`CallEvolution` keeps its other fields)."""
    from evolution.models import EvolutionReport

    if tool.trigger == "manual":
        handle = client.send("prepare_evolution", namespace=tool.name, reason="bench: evolved by hand")
        return EvolutionReport.model_validate(client.wait(handle, CALL_TIMEOUT_S))
    for call in tool.calls:
        result = _call(client, call)
        if result.evolution is not None:
            return EvolutionReport.model_validate(result.evolution.model_dump())
    return None


def _by_version(client: CallSender, call: BenchCall, name: str, version: str) -> bool:
    return call.judge(_answer(client, client.send("call_tool", name=name, input=call.input, version=version,
                                                  after_evolution=True)))


def flaky_port_free() -> bool:
    """The flaky upstream's port (the exchange_rate manifest names it) must be free."""
    import socket

    port = int(os.environ.get(FLAKY_PORT_ENV, "8767"))
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0
