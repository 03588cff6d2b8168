"""`fittest report`: one self-contained HTML page (plots embedded as PNG) of how the tools did.

Everything comes from Redis (workers/metrics.py series, the state's counters and promotion
histories), so the report can be written from any machine while the workers run, without touching
the vector store the memory worker owns.
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: render to PNG only

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from pydantic import BaseModel

from evolution.promotions import MANIFEST_MUTATION
from selection.models import Promotion
from selection.ports import ToolStats
from workers.metrics import AttemptPoint, CallPoint, MetricsReader, evolution_events

PALETTE = plt.get_cmap("tab10")
OK_COLOR, FAIL_COLOR, APART_COLOR = "#2e9d4a", "#d1495b", "#9a9a9a"
LABEL_HEIGHTS = (8, -14, 17)  # points above (+) or below (-) a row at which its events' versions are written by turns


class ReportData(BaseModel):
    """What the page shows, read from Redis once."""

    generated_at: float
    stats: dict[str, ToolStats]
    attempts: dict[str, list[AttemptPoint]]
    calls: list[CallPoint]
    promotions: dict[str, list[Promotion]]
    queues: dict[str, int]

    @classmethod
    def read(cls, reader: MetricsReader, since: float | None = None) -> ReportData:
        attempts = {key: [p for p in reader.attempts(key) if since is None or p.t >= since] for key in reader.attempt_keys()}
        queues: Counter[str] = Counter()
        for (queue, _), n in reader.queue_lengths().items():
            queues[queue] += n
        return cls(
            generated_at=time.time(),
            stats=reader.state.all_stats(),
            attempts={k: v for k, v in attempts.items() if v},
            calls=[c for c in reader.calls() if since is None or c.t >= since],
            promotions={ns: [p for p in history if since is None or p.promoted_at >= since]  # QA ops: --hours too
                        for ns, history in reader.state.all_promotion_histories().items()},
            queues=dict(queues),
        )

    def ran(self) -> list[CallPoint]:
        """The calls that tried a tool: one refused for its payload, or with nothing to try, counts
        as a call made but says nothing about how many attempts a call takes."""
        return [c for c in self.calls if c.attempts]

    def busiest(self, n: int) -> list[str]:
        """The `n` tool versions with the most attempts (the plots show these; the table all)."""
        return sorted(self.attempts, key=lambda k: (-len(self.attempts[k]), k))[:n]


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _time_axis(ax: plt.Axes) -> None:
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.grid(alpha=0.3)


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_quality(data: ReportData, keys: list[str]) -> str:
    """Quality per tool version over time: as selection saw it at each attempt, then now."""
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, key in enumerate(keys):
        points = data.attempts[key]
        times = [_when(p.t) for p in points] + [_when(data.generated_at)]
        quality = [p.quality for p in points] + [data.stats[key].quality if key in data.stats else points[-1].quality]
        ax.step(times, quality, where="post", label=key, color=PALETTE(i % 10), linewidth=1.8)  # type: ignore[arg-type]  # dates
    if keys:
        ax.set_ylim(-0.02, 1.05)
        ax.set_ylabel("quality")
        _time_axis(ax)
        ax.legend(loc="lower left", fontsize=8, ncol=2, framealpha=0.9)
    else:
        _empty(ax, "no attempts recorded yet")
    ax.set_title("Quality per tool version")
    return _png(fig)


def plot_feedback(data: ReportData, keys: list[str], buckets: int = 24) -> str:
    """Positive (success) and negative (failure) feedback per tool version over time."""
    cols = 2
    rows = max(1, (len(keys) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(9, 2.2 * rows), squeeze=False, sharex=True)
    times = [p.t for key in keys for p in data.attempts[key]]
    start, end = (min(times), max(max(times), min(times) + 1.0)) if times else (0.0, 1.0)
    width = (end - start) / buckets
    for ax, key in zip(axes.flat, keys):
        ok, bad, apart = [0] * buckets, [0] * buckets, [0] * buckets
        for p in data.attempts[key]:
            i = min(buckets - 1, int((p.t - start) / width))
            (ok if p.ok else apart if p.counted_apart else bad)[i] += 1
        centers = [_when(start + (i + 0.5) * width) for i in range(buckets)]
        bar_w = width / 86400 * 0.9  # matplotlib dates are in days
        ax.bar(centers, ok, width=bar_w, color=OK_COLOR, label="positive")
        ax.bar(centers, [-b for b in bad], width=bar_w, color=FAIL_COLOR, label="negative")
        if any(apart):  # as `fittest tools` lists them: refused inputs, which lower nothing (QA ops L3)
            ax.bar(centers, [-a for a in apart], bottom=[-b for b in bad], width=bar_w, color=APART_COLOR,
                   label="refused inputs (counted apart)")
        ax.axhline(0, color="#444", linewidth=0.6)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(key, fontsize=9)
        _time_axis(ax)
    for ax in list(axes.flat)[len(keys):]:
        if keys:
            ax.set_visible(False)
        else:
            _empty(ax, "no feedback recorded yet")
    if keys:
        axes.flat[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Feedback per tool version (successes up, failures down, per time bucket)", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def plot_calls(data: ReportData) -> str:
    """Attempts per call: how often the first choice was right, and over time."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [1, 1.6]})
    ran = data.ran()
    if not ran:
        _empty(left, "no calls recorded yet")
        _empty(right, "")
    else:
        top = max(c.attempts for c in ran)
        levels = list(range(1, top + 1))
        bottom = [0] * len(levels)
        for status, color in (("success", OK_COLOR), ("failed", FAIL_COLOR)):
            counts = Counter(c.attempts for c in ran if c.status == status)
            heights = [counts.get(n, 0) for n in levels]
            left.bar(levels, heights, bottom=bottom, color=color, label=status)
            bottom = [b + h for b, h in zip(bottom, heights)]
        left.set_xlabel("attempts in the call")
        left.set_ylabel("calls")
        left.set_xticks(levels)
        left.yaxis.set_major_locator(MaxNLocator(integer=True))
        left.legend(fontsize=8)
        left.grid(alpha=0.3, axis="y")
        window = max(5, len(ran) // 10)
        ordered = sorted(ran, key=lambda c: c.t)
        means = [
            sum(c.attempts for c in ordered[max(0, i - window + 1) : i + 1]) / len(ordered[max(0, i - window + 1) : i + 1])
            for i in range(len(ordered))
        ]
        right.scatter([_when(c.t) for c in ordered], [c.attempts for c in ordered], s=8, alpha=0.35,
                      c=[OK_COLOR if c.status == "success" else FAIL_COLOR for c in ordered])
        right.plot([_when(c.t) for c in ordered], means, color="#333", linewidth=1.5,
                   label=f"mean of the last {window}")
        right.set_ylabel("attempts")
        right.set_ylim(0, top + 0.5)
        right.legend(fontsize=8, loc="upper right")
        _time_axis(right)
    fig.suptitle("Attempts per call", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def plot_evolution(data: ReportData) -> str:
    """Evolutions (a version put on trial), activations and rollbacks per namespace over time."""
    names = sorted(n for n, h in data.promotions.items() if h)
    fig, ax = plt.subplots(figsize=(9, max(2.2, 0.5 * len(names) + 1.4)))
    if not names:
        _empty(ax, "no evolutions or rollbacks yet")
    else:
        markers = {"on_trial": ("^", "#3b6fb6", "on trial (evolved, or a manifest's new version)"), "active": ("o", OK_COLOR, "activated"),
                   "rolled_back": ("X", FAIL_COLOR, "rolled back")}
        for status, (marker, color, label) in markers.items():
            xs = [_when(p.promoted_at) for n in names for p in data.promotions[n] if p.status == status]
            ys = [names.index(n) for n in names for p in data.promotions[n] if p.status == status]
            if xs:
                ax.scatter(xs, ys, marker=marker, s=70, color=color, label=label, zorder=3)  # type: ignore[arg-type]  # dates
        for n in names:
            # at three heights by turns: a promote and its rollback a minute apart wrote one version
            # over the other (QA ops L3), and three events within half a minute did so at two (QA recheck N8)
            for k, p in enumerate(sorted(data.promotions[n], key=lambda p: p.promoted_at)):
                ax.annotate(p.evolved_version, (_when(p.promoted_at), names.index(n)), textcoords="offset points",
                            xytext=(0, LABEL_HEIGHTS[k % len(LABEL_HEIGHTS)]), ha="center", fontsize=7, color="#555")
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(-0.7, len(names) - 0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        _time_axis(ax)
    ax.set_title("Evolutions and rollbacks")
    return _png(fig)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1040px;color:#222}
h1{margin-bottom:0}.sub{color:#666;margin-top:4px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:18px 0}
.card{border:1px solid #ddd;border-radius:8px;padding:10px 16px;min-width:120px}
.card b{display:block;font-size:22px}
img{max-width:100%;border:1px solid #eee;border-radius:6px;margin:6px 0 18px}
table{border-collapse:collapse;width:100%;font-size:14px;margin-bottom:24px}
th,td{border-bottom:1px solid #e5e5e5;padding:5px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
.good{color:#2e9d4a}.mid{color:#b7791f}.bad{color:#d1495b}
"""


def _quality_class(q: float) -> str:
    return "good" if q >= 0.9 else "mid" if q >= 0.7 else "bad"


def share(part: int, whole: int) -> str:
    """A percentage that says 100% or 0% only when it is exactly that (QA: 3,138 successes of
    3,150 calls showed as 100%)."""
    if not whole:
        return "–"
    if part in (0, whole):
        return f"{part // whole:.0%}"
    return f"{min(max(100 * part / whole, 0.1), 99.9):.1f}%"


def render(data: ReportData, top: int = 8) -> str:
    keys = data.busiest(top)
    calls = len(data.calls)
    ok = sum(c.status == "success" for c in data.calls)
    ran = data.ran()
    attempts = sum(c.attempts for c in ran)
    # versions evolved, not a manifest's new versions, which go on trial too (QA ops: "evolutions 2",
    # where every evolution had found no fix and two manifests had been given new versions)
    evolutions = sum(p.mutation != MANIFEST_MUTATION for h in data.promotions.values() for p in evolution_events(h)[0])
    rollbacks = sum(len(evolution_events(h)[1]) for h in data.promotions.values())
    cards = [
        ("calls", f"{calls}"),
        ("succeeded", share(ok, calls)),
        ("attempts per call", f"{attempts / len(ran):.2f}" if ran else "–"),
        ("tool versions run", f"{len(set(data.stats) | set(data.attempts))}"),
        ("versions evolved", f"{evolutions}"),
        ("rollbacks", f"{rollbacks}"),
        ("queued", f"{sum(data.queues.values())}"),
    ]
    rows = []
    for key in sorted(set(data.stats) | set(data.attempts)):
        stats = data.stats.get(key, ToolStats())
        q, s, f = stats.quality, stats.successes, stats.failures
        points = data.attempts.get(key, [])
        mean_ms = f"{sum(p.ms for p in points) / len(points):.1f}" if points else "–"
        rows.append(
            f"<tr><td>{html.escape(key)}</td><td class='{_quality_class(q)}'>{q:.2f}</td><td>{s}</td><td>{f}</td>"
            f"<td>{len(points)}</td><td>{mean_ms}</td></tr>"
        )
    stamp = _when(data.generated_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [
        ("Quality per tool version", plot_quality(data, keys),
         f"The {len(keys)} busiest tool versions; quality as selection saw it at each attempt, last point now."
         if keys else "No attempt recorded in this period."),
        ("Feedback per tool version", plot_feedback(data, keys), "Successful attempts count as positive feedback, failed ones as negative; "
         "refused inputs (the caller's mistake, or a fallback's refusal of another tool's job) are grey, counted apart "
         "as `fittest tools` counts them; a person's judgements are not in it (`fittest feedback show NAME` lists them)."),
        ("Attempts per call", plot_calls(data), "One attempt means the first choice worked; more mean fallbacks."),
        ("Evolutions and rollbacks", plot_evolution(data), "From each namespace's promotion history."),
    ]
    body = "".join(
        f"<h2>{html.escape(title)}</h2><p class='sub'>{html.escape(note)}</p>"
        f"<img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>"
        for title, png, note in sections
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>fittest report</title>"
        f"<style>{_CSS}</style></head><body><h1>fittest report</h1><p class='sub'>generated {stamp}</p>"
        "<div class='cards'>" + "".join(f"<div class='card'>{html.escape(k)}<b>{v}</b></div>" for k, v in cards) + "</div>"
        + body
        + "<h2>Tool versions</h2><table><tr><th>tool version</th><th>quality</th><th>successes</th><th>failures</th>"
        "<th>recorded attempts</th><th>mean ms</th></tr>" + "".join(rows) + "</table></body></html>"
    )


def write_report(reader: MetricsReader, out: Path, since: float | None = None, top: int = 8) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(render(ReportData.read(reader, since), top=top), encoding="utf-8")
    return path
