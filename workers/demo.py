"""`fittest demo`: the newcomer's end-to-end run on real workers.

It starts Redis (when none answers), the worker roles and the example HTTP tool, registers
`examples/tools`, sends a stream of calls built from the tools' own examples and test inputs
(some of which fail on purpose), and shows what the system did: quality per tool, and a few
calls attempt by attempt.
"""

from __future__ import annotations

import random
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from selection.models import CallResult
from selection.registry import ToolRegistry
from workers.settings import Settings
from workers.procfile import EXAMPLE_SERVICE_PORT, example_service, hold_data_dir
from workers.stack import ROOT, Stack

DEMO_ROLES = ("memory", "executor", "evolver")


EXAMPLE_TOOLS = ROOT / "examples" / "tools"


def demo_settings(settings: Settings) -> Settings:
    """The demo keeps its own keys, collections and files, so it never touches real state, and
    serves the example tools its calls are written for, whatever FITTEST_TOOLS_DIR says and
    wherever it is run from."""
    return settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}demo:",
            "collection_prefix": f"{settings.collection_prefix}demo_",
            "data_dir": settings.data_dir / "demo",
            "tools_dir": EXAMPLE_TOOLS,
        }
    )


DEMO_CALLS = ROOT / "examples" / "demo_calls.yaml"


def demo_calls(n: int, path: Path = DEMO_CALLS) -> list[dict[str, Any]]:
    """The first n calls of rounds over the curated list; `{range: N}` expands to a shuffled list."""
    templates = yaml.safe_load(path.read_text())
    rng = random.Random(7)
    calls = []
    for i in range(n):
        call = dict(templates[i % len(templates)])
        numbers = call.get("input", {}).get("numbers")
        if isinstance(numbers, dict):
            values = list(range(numbers["range"]))
            rng.shuffle(values)
            call["input"] = {**call["input"], "numbers": values}
        calls.append(call)
    return calls


def _abridge(output: Any) -> Any:
    """Long lists (the big sort) are shown by their length, not printed whole."""
    if isinstance(output, dict):
        return {k: _abridge(v) for k, v in output.items()}
    if isinstance(output, list) and len(output) > 12:
        return [*output[:5], f"… {len(output) - 5} more"]
    return output


def reset_state(settings: Settings) -> None:
    from workers.memory import open_vector_memory
    from workers.state import open_state_store

    open_state_store(settings).clear()
    memory = open_vector_memory(settings)
    memory.drop_all()
    memory.close()


def run_demo(settings: Settings, calls: int, fresh: bool, console: Console) -> int:
    from workers.cli.calls import show_call
    from workers.cli.common import literal
    from workers.cli.tools import tool_rows, tools_table
    from fittest.client import FittestClient
    from workers.state import open_state_store

    settings = demo_settings(settings)
    registry = ToolRegistry.load([settings.tools_dir])
    for error in registry.errors:
        console.print(f"[yellow]skipped manifest[/yellow] {literal(error)}")
    env = {
        "FITTEST_KEY_PREFIX": settings.key_prefix,
        "FITTEST_COLLECTION_PREFIX": settings.collection_prefix,
        "FITTEST_DATA_DIR": str(settings.data_dir.resolve()),
        "FITTEST_TOOLS_DIR": str(settings.tools_dir.resolve()),
        # The demo serves examples/tools, whose convert_units names this port (QA: a port moved for
        # `fittest up` moved the demo's example service away from its manifest).
        "FITTEST_EXAMPLE_HTTP_PORT": str(EXAMPLE_SERVICE_PORT),
    }
    if settings.embedding_model_path:
        env["FITTEST_EMBEDDING_MODEL_PATH"] = str(Path(settings.embedding_model_path).resolve())
    from workers.embedder import EmbedderUnavailable, open_embedder

    try:  # fail before starting anything when the model cannot load
        open_embedder(settings)
    except EmbedderUnavailable as exc:
        console.print(f"[red]error:[/red] {literal(exc)}")
        return 1
    # One demo at a time on its data directory: a second one's fresh start would wipe the first's
    # state, and its memory worker could not open the embedded store (workers/procfile.py).
    held = hold_data_dir(settings, DEMO_ROLES)
    with Stack(settings, env=env, log_dir=settings.data_dir / "logs") as stack, (held or nullcontext()):
        console.print("[bold]1.[/bold] starting Redis (if needed), the workers and the example HTTP tool …")
        stack.ensure_redis()
        if others := stack.workers_answering():
            console.print(f"[red]error:[/red] workers already take the calls of this Redis database ({literal(', '.join(others))}): "
                          "they would run the demo's calls with another stack's state. Stop them, or run the demo on another "
                          "database (FITTEST_REDIS_URL=redis://HOST:PORT/1)")
            return 1
        settings = settings.model_copy(update={"redis_url": stack.redis_url})
        if fresh:
            reset_state(settings)
        service = example_service(EXAMPLE_SERVICE_PORT)
        if service == "other":
            console.print(f"[red]error:[/red] port {EXAMPLE_SERVICE_PORT} is in use by something that is not the example "
                          "HTTP tool (convert_units' manifest names that port): stop it, or run the demo elsewhere")
            return 1
        if service == "free":
            stack.start("toolserver", [sys.executable, str(ROOT / "examples" / "tools" / "http_server.py")])
        else:
            console.print(f"    the example HTTP tool already answers on port {EXAMPLE_SERVICE_PORT}: the demo uses it")
        stack.start_roles(DEMO_ROLES)
        stack.wait_for_workers(DEMO_ROLES, timeout=120)
        console.print(f"    workers up; logs in {literal(settings.data_dir / 'logs')}")

        client = FittestClient(settings=settings)
        plan = demo_calls(calls)
        console.print(f"[bold]2.[/bold] sending {len(plan)} calls built from {len(registry.all())} example tools")
        results: list[tuple[dict[str, Any], CallResult]] = []  # each call, and its result
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task("calls", total=len(plan))
            for call in plan:
                results.append((call, client.run(timeout=180, **call)))
                progress.advance(task)

        state = open_state_store(settings)
        time.sleep(1.0)  # the feedback queue applies the last failures and successes
        rows = tool_rows(registry.all(), state, settings.trial_successes)
        console.print("[bold]3.[/bold] what the calls did to the tools")
        console.print(tools_table(rows, title="tools after the demo (quality starts at 1.00)"))
        ok = sum(r.status == "success" for _, r in results)
        fell_back = [(c, r) for c, r in results if r.status == "success" and len(r.attempts) > 1]
        console.print(f"    {ok}/{len(results)} calls succeeded, {len(fell_back)} of them after a fallback")
        console.print("[bold]4.[/bold] a few calls, attempt by attempt")
        picked = fell_back[:2] + [(c, r) for c, r in results if r.status != "success"][:1] + results[:1]
        shown = list({r.call_id: (c, r) for c, r in picked}.values())  # each call once (the first may also be the failed one)
        for call, r in shown:
            console.print(f"\n[dim]scenario:[/dim] {literal(repr(call['scenario']))}  "
                          f"[dim]namespace:[/dim] {literal(call.get('namespace'))}")
            show_call(r.model_copy(update={"output": _abridge(r.output)}))
        console.print("\nThe demo kept its state apart and stopped its workers. Next: `fittest up` runs the full stack; "
                      "then, in another shell, `fittest call \"count the words of this text\" --input '{\"text\": \"one two\"}'` "
                      "and `fittest tools`.")
    return 0 if ok else 1
