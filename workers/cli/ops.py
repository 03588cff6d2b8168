"""`fittest health`, `fittest metrics`, `fittest report`, `fittest settings`: run it and watch it."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.table import Table

from workers.cli.common import REFUSED, JsonOpt, check_redis, console, fail, literal, print_json, reads_state, seconds, warn_of_other_stacks
from workers.settings import OTHER_VARIABLES, Settings, get_settings, shown_value

app = typer.Typer()

CHECKS = ("redis", "workers", "store", "model", "tools", "beat", "flower", "metrics", "toolserver")
HEALTH_TIMEOUT_MAX_S = 3600.0


# --------------------------------------------------------------------------------------- health
@app.command()
def health(
    check: Annotated[list[str] | None, typer.Option("--check", "-c", help=f"Only these checks (repeatable): {', '.join(CHECKS)}.")] = None,
    worker: Annotated[list[str] | None, typer.Option("--worker", "-w", help="Roles that must be running: a worker role (memory, executor, evolver) or a node name (executor@host); beat (checked by the lock it holds); flower, metrics or toolserver (each asked at its page on this host: /healthcheck, /metrics, /health). Repeatable; default: the worker roles and the beat.")] = None,
    # Bounded: the probe waits its whole timeout for every worker's answer, and `inf` or 1e9 ended in an
    # OverflowError (QA recheck 47 F2)
    timeout: Annotated[float, typer.Option(min=0.1, callback=seconds, max=HEALTH_TIMEOUT_MAX_S, help="Seconds to wait for Redis, the store and the workers' answers (it waits that long for the workers').")] = 2.0,
    json_out: JsonOpt = False,
) -> None:
    """Check Redis, the vector store, the embedding model, the tools directory, the workers and the beat.

    Exit code 0 when healthy, 1 when any check failed (a `warn`, such as refused tool manifests,
    names something to fix and passes): use it as a liveness or readiness probe
    (docker compose healthcheck, Kubernetes exec probe). The embedded store and the model are
    checked live by the memory worker that owns them; a Qdrant server is asked directly."""
    from workers.health import BEAT, ROLES, SERVED
    from workers.health import health as run_health

    roles = list(worker or (*ROLES, BEAT))
    checks = check or [c for c in CHECKS if c not in (BEAT, *SERVED) or c in roles]
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        fail(f"unknown check {', '.join(unknown)} (known: {', '.join(CHECKS)})", REFUSED)
    # A role, or a node name ROLE@HOST of one (QA ops L9, QA recheck N9: a typo exited 1, unhealthy,
    # which a probe reads as a worker down).
    # (the beat is no Celery node: it answers by its lock, never as beat@HOST)
    if not_roles := sorted({r for r in roles if (r.partition("@")[0] not in ROLES and r not in (BEAT, *SERVED))
                            or r.endswith("@")}):
        fail(f"unknown role {', '.join(not_roles)} (the roles: {', '.join((*ROLES, BEAT, *SERVED))}; or a node name, "
             "ROLE@HOST)", REFUSED)
    report = run_health(get_settings(), checks, roles, timeout)
    if json_out:
        print_json(report.model_dump())
    else:
        table = Table(title="fittest health: " + ("[green]healthy[/green]" if report.healthy else "[red]unhealthy[/red]"))
        for col in ("check", "status", "ms", "detail"):
            table.add_column(col, justify="right" if col == "ms" else "left")
        colors = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "yellow"}
        for c in report.checks:
            table.add_row(literal(c.name), f"[{colors[c.status]}]{c.status}[/{colors[c.status]}]", f"{c.ms:.0f}", literal(c.detail))
        console.print(table)
    raise typer.Exit(0 if report.healthy else 1)


# --------------------------------------------------------------------------------------- metrics
@app.command()
def metrics(
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port of the /metrics endpoint (default FITTEST_METRICS_PORT).")] = None,
    addr: Annotated[str | None, typer.Option(help="Address to listen on (default FITTEST_METRICS_ADDR).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Print the metrics once in Prometheus text format and exit.")] = False,
) -> None:
    """Serve Prometheus metrics on /metrics.

    Selections, attempts by outcome and failure class, calls, evolutions, rollbacks, quality per
    tool version and queue lengths, read from Redis at each scrape: one endpoint covers every
    worker process on every host."""
    from workers.metrics import exposition, serve

    settings = get_settings()
    if once:
        check_redis()
        warn_of_other_stacks(settings)  # its counters would read zero (QA 57a M6)
        typer.echo(exposition(settings).decode(), nl=False)
        return
    given, addr = addr is not None, addr or settings.metrics_addr
    try:
        server, _ = serve(settings, port, addr)
    except OSError as exc:  # the port is taken (another `fittest metrics`), or the address is not ours (QA README L2)
        in_use = exc.errno == errno.EADDRINUSE
        hint = ("--port or FITTEST_METRICS_PORT chooses another port" if in_use
                else "--addr or FITTEST_METRICS_ADDR chooses an address of this host")
        # a port in use is something outside the command, and so is a setting refused (1); an --addr
        # that is not this host's is the value given, refused (2, QA 60d L6)
        fail(f"cannot serve metrics on {addr}:{port or settings.metrics_port} ({exc.strerror or exc}); {hint}",
             REFUSED if given and not in_use else 1)
    console.print(f"metrics on http://{literal(addr)}:{server.server_port}/metrics (Ctrl-C stops)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


# --------------------------------------------------------------------------------------- report
@app.command()
@reads_state
def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write index.html into.")] = Path("fittest-report"),
    hours: Annotated[float | None, typer.Option(help="Only the last HOURS of attempts and calls (more than 0).")] = None,
    top: Annotated[int, typer.Option(min=1, help="Tool versions plotted (the busiest); the table lists every version with recorded counters.")] = 8,
) -> None:
    """Write an HTML report of how the tools did.

    Plots of quality and feedback per tool version over time, attempts per call, evolutions and
    rollbacks, with the PNG images embedded: one file to open or mail."""
    from workers.metrics import reader_for
    from workers.report import write_report

    if hours is not None and not hours > 0:
        fail(f"--hours must be more than 0, not {hours:g}", REFUSED)
    since = time.time() - hours * 3600 if hours is not None else None
    try:  # refused in one line, as a bad argument is (QA new user: a traceback, exit 1)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        there = out.exists() and not out.is_dir()
        fail(f"--out {out}: {'something that is not a directory is there' if there else exc.strerror or exc}", REFUSED)
    try:
        path = write_report(reader_for(get_settings()), out, since=since, top=top)
    except OSError as exc:
        if exc.filename is None:  # not the file: let the crash say what it was
            raise
        fail(f"--out {out}: cannot write {exc.filename}: {exc.strerror or exc}", REFUSED)
    console.print(f"report written to {literal(path)}")


# --------------------------------------------------------------------------------------- settings
class SettingRow(BaseModel):
    """One line of `fittest settings` (and of its --json and --markdown)."""

    variable: str
    default: str  # as the environment would spell it; "" when unset
    meaning: str
    value: str = ""  # the current one, secrets hidden


def settings_rows() -> list[SettingRow]:
    """Every FITTEST_ variable with its default and meaning, from the Settings model itself."""
    rows = []
    for name, field in Settings.model_fields.items():
        default: Any = field.default
        rows.append(SettingRow(
            variable=f"FITTEST_{name.upper()}",
            default="" if default is None else str(default).lower() if isinstance(default, bool) else str(default),
            meaning=field.description or "",
        ))
    rows.append(SettingRow(variable="FITTEST_CONFIG", default="",
                           meaning="Optional TOML file of the same settings (lower-case names); the environment wins"))
    return rows


SETTINGS_HELP = ("Show every FITTEST_ setting: its current value (secrets hidden), default and meaning.\n\n"
                 "Not among them, as read outside the settings (README, \"Settings\"): "
                 + "; ".join(f"{name}, {meaning}" for name, meaning in OTHER_VARIABLES.items()) + ".")


@app.command("settings", help=SETTINGS_HELP)
def show_settings(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the table of every variable, default and meaning as Markdown.")] = False,
    json_out: JsonOpt = False,
) -> None:
    current = get_settings().model_dump()
    rows = settings_rows()
    for row in rows:
        value = current.get(row.variable.removeprefix("FITTEST_").lower(), os.environ.get(row.variable))
        row.value = shown_value(value)  # as its default reads
    if markdown:
        lines = ["| variable | default | meaning |", "|---|---|---|"]
        lines += [f"| `{r.variable}` | {('`' + r.default + '`') if r.default else '(unset)'} | {r.meaning} |" for r in rows]
        typer.echo("\n".join(lines))
    elif json_out:
        print_json([r.model_dump() for r in rows])
    else:
        table = Table(title="fittest settings (FITTEST_CONFIG names an optional TOML file)")
        columns = ("variable", "value", "default", "meaning")
        for col in columns:
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(*(literal(getattr(r, col)) for col in columns))
        console.print(table)
