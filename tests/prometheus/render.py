#!/usr/bin/env python3
"""Draws the Grafana dashboards of deploy/dashboards/ as PNG pictures, without Grafana.

Usage: render.py DATA.json OUTDIR

DATA.json is what the e2e test `deploy::prometheus` writes when KIM_DASHBOARD_DATA names it:
every dashboard query's `query_range` answer from the real Prometheus that scraped the test's
controller and webhook (`make dashboards-picture` runs both steps). Each dashboard becomes
OUTDIR/dashboard-<uid>.png, laid out on Grafana's 24-column grid: time series as lines over
the seconds of the run, stats and tables as at the run's end (the series present at the last
step, as Grafana's instant query would return them). Needs matplotlib (pip install matplotlib, or
Debian's python3-matplotlib).
"""

import json
import math
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402  (a dependency of matplotlib)

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "deploy" / "dashboards"

# Grafana's dark theme, roughly.
BACKGROUND = "#111217"
PANEL = "#181b1f"
TEXT = "#ccccdc"
GRID = "#2c3235"
COLOURS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
           "#fade2a", "#37872d", "#c4162a"]

# Inches per grid column and per grid row (Grafana: 24 columns, 30 px rows).
COLUMN = 0.62
ROW = 0.28
DPI = 80
MAX_LEGEND = 8


def legend(fmt, metric):
    """Grafana's legendFormat: {{label}} replaced by the series' label value."""
    if not fmt:
        return ", ".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip() or "value"


def points(series):
    xs, ys = [], []
    for t, v in series["values"]:
        y = float(v)
        if math.isfinite(y):
            xs.append(float(t))
            ys.append(y)
    return xs, ys


def human(value, unit):
    """A value as Grafana would show it, for the units the dashboards use."""
    if unit == "s":
        sign = "-" if value < 0 else ""
        v = abs(value)
        for size, name in ((86400, "day"), (3600, "hour"), (60, "min")):
            if v >= size:
                n = v / size
                return f"{sign}{n:.1f} {name}{'s' if n >= 2 else ''}"
        if v >= 1 or v == 0:
            return f"{sign}{v:.2f} s"
        return f"{sign}{v * 1000:.1f} ms"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def style(ax, title):
    ax.set_facecolor(PANEL)
    for side in ax.spines.values():
        side.set_color(GRID)
    ax.tick_params(colors=TEXT, labelsize=7)
    ax.set_title(title, color=TEXT, fontsize=9, loc="left", pad=4)


def draw_timeseries(ax, panel, answers, start, end):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    lines = 0
    for target in panel["targets"]:
        for series in answers.get(target["expr"], []):
            xs, ys = points(series)
            if not xs:
                continue
            label = legend(target.get("legendFormat", ""), series["metric"])
            ax.plot([x - start for x in xs], ys, linewidth=1.2,
                    color=COLOURS[lines % len(COLOURS)],
                    label=label if lines < MAX_LEGEND else None)
            lines += 1
    ax.grid(color=GRID, linewidth=0.5)
    ax.set_xlim(0, end - start)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.0f} s"))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human(v, unit)))
    if lines:
        more = f" (+{lines - MAX_LEGEND} more)" if lines > MAX_LEGEND else ""
        ax.legend(fontsize=6, loc="upper left", facecolor=PANEL, edgecolor=GRID,
                  labelcolor=TEXT, title=more or None, title_fontsize=6)


def last_values(panel, answers):
    """(legend, value, labels) of every series of the panel that has a value at the last step
    (series that ended before, such as a deleted Runtime's state, are gone at the end)."""
    found = []
    for target in panel["targets"]:
        for series in answers.get(target["expr"], []):
            xs, ys = points(series)
            if xs:
                found.append((xs[-1], legend(target.get("legendFormat", ""), series["metric"]),
                              ys[-1], series["metric"]))
    end = max((t for t, _, _, _ in found), default=None)
    return [(name, value, metric) for t, name, value, metric in found if t == end]


def draw_stat(ax, panel, answers):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    values = last_values(panel, answers)[:6]
    ax.set_xticks([])
    ax.set_yticks([])
    for i, (name, value, _) in enumerate(values):
        x = (i + 0.5) / len(values)
        ax.text(x, 0.5, human(value, unit), color=COLOURS[i % len(COLOURS)], fontsize=15,
                ha="center", va="center", transform=ax.transAxes, weight="bold")
        ax.text(x, 0.2, name, color=TEXT, fontsize=7, ha="center", transform=ax.transAxes)


def draw_table(ax, panel, answers):
    ax.set_xticks([])
    ax.set_yticks([])
    rows = last_values(panel, answers)
    if not rows:
        return
    columns = sorted({k for _, _, m in rows for k in m if k != "__name__"})
    lines = ["  ".join(columns + ["value"])]
    for _, value, metric in rows[:8]:
        cells = [metric.get(c, "")[:40] for c in columns]
        lines.append("  ".join(cells + [human(value, "short")]))
    if len(rows) > 8:
        lines.append(f"... {len(rows) - 8} more rows")
    ax.text(0.01, 0.95, "\n".join(lines), color=TEXT, fontsize=6, family="monospace",
            va="top", ha="left", transform=ax.transAxes)


def render(dashboard, answers, start, end, out):
    panels = dashboard["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) + 2
    fig = plt.figure(figsize=(24 * COLUMN, height * ROW), dpi=DPI, facecolor=BACKGROUND)
    fig.text(0.01, 1 - 0.9 / height, dashboard["title"], color=TEXT, fontsize=13, weight="bold",
             va="center")
    fig.text(0.99, 1 - 0.9 / height,
             "one run of the e2e test deploy::prometheus, from its Prometheus; "
             "x: seconds since Prometheus started", color=TEXT, fontsize=8, ha="right",
             va="center")
    top = 2  # grid rows above the first panel: the dashboard's title

    def box(pos, pad_x=0.12, pad_top=0.75, pad_bottom=0.9):
        x, y, w, h = pos["x"], pos["y"] + top, pos["w"], pos["h"]
        return [(x + pad_x) / 24, 1 - (y + h - pad_bottom * 0.5) / height,
                (w - 2 * pad_x) / 24, (h - pad_top - pad_bottom * 0.5) / height]

    for panel in panels:
        pos = panel["gridPos"]
        if panel["type"] == "row":
            fig.text(0.01, 1 - (pos["y"] + top + 0.5) / height, panel["title"], color=TEXT,
                     fontsize=11, va="center")
            continue
        kind = panel["type"]
        if kind == "timeseries":
            ax = fig.add_axes(box(pos, pad_x=1.0, pad_bottom=1.4))
        else:
            ax = fig.add_axes(box(pos, pad_bottom=0.4))
        style(ax, panel["title"])
        if kind == "timeseries":
            draw_timeseries(ax, panel, answers, start, end)
        elif kind == "stat":
            draw_stat(ax, panel, answers)
        else:
            draw_table(ax, panel, answers)
    fig.savefig(out, facecolor=BACKGROUND, dpi=DPI)
    plt.close(fig)
    # A palette of 64 colours keeps each picture small.
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        target = out / f"dashboard-{dashboard['uid']}.png"
        render(dashboard, data["series"], data["start"], data["end"], target)
        print(f"{target}: {target.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
