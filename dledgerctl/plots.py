"""Pictures of a store or a group, as PNG files (matplotlib, its Agg canvas: no display and
no pyplot state), and the lag sparklines of ``peer watermarks --watch``.

Each figure has a fixed size (WIDTH x HEIGHT pixels), so scripts and tests know what they
get. The data comes in as the rows the commands print; nothing here reads a store.
"""

from __future__ import annotations

import os

WIDTH, HEIGHT, DPI = 1200, 700, 100
SPARKS = "▁▂▃▄▅▆▇█"


class PlotError(Exception):
    """A picture that cannot be made (nothing to draw, an unwritable file)."""


def sparkline(values: list[float | None]) -> str:
    """One block per value, scaled to the largest of them ("▁" for 0, "█" for the largest;
    a space where the value is unknown)."""
    known = [v for v in values if v is not None]
    top = max(known, default=0)
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARKS[0])
        else:
            out.append(SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))])
    return "".join(out)


def _figure(rows: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    return fig, axes


def _save(fig, path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    try:
        fig.savefig(path, format="png", dpi=DPI)
    except OSError as exc:
        raise PlotError(f"cannot write {path}: {exc.strerror or exc}") from None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def leader_history(rows: list[dict], path: str, title: str = "") -> None:
    """``spark stats`` rows (node, term, entries, bytes, first_index, last_index): above,
    each node's log as the index ranges of its terms, a colour per term (who led when, and
    where replicas hold other terms); below, bytes per term per node."""
    rows = [r for r in rows if r.get("entries")]
    if not rows:
        raise PlotError("nothing to draw: the logs hold no entries")
    nodes = sorted({r["node"] for r in rows})
    terms = sorted({r["term"] for r in rows})
    fig, (top, bottom) = _figure(2)
    cmap = _term_colours(terms)
    for y, node in enumerate(nodes):
        for r in (r for r in rows if r["node"] == node):
            width = r["last_index"] - r["first_index"] + 1
            top.barh(y, width, left=r["first_index"], height=0.6, color=cmap[r["term"]], edgecolor="black",
                     linewidth=0.4)
            if len(terms) <= 40:
                top.text(r["first_index"] + width / 2, y, str(r["term"]), ha="center", va="center", fontsize=7,
                         clip_on=True)
    top.set_yticks(range(len(nodes)), [os.path.basename(n.rstrip("/")) or n for n in nodes])
    top.invert_yaxis()
    top.set_xlabel("entry index")
    top.set_title((title + ": " if title else "") + "leader history (each term's index range; labels: term)")
    width = 0.8 / len(nodes)
    for k, node in enumerate(nodes):
        by_term = {r["term"]: r["bytes"] for r in rows if r["node"] == node}
        xs = [i + (k - (len(nodes) - 1) / 2) * width for i in range(len(terms))]
        bottom.bar(xs, [by_term.get(t, 0) for t in terms], width=width,
                   label=os.path.basename(node.rstrip("/")) or node)
    step = max(1, len(terms) // 30)
    bottom.set_xticks(range(0, len(terms), step), [str(t) for t in terms[::step]])
    bottom.set_xlabel("term")
    bottom.set_ylabel("bytes")
    bottom.yaxis.set_major_formatter(_bytes_formatter())
    bottom.set_title("bytes per term")
    bottom.legend(fontsize=8, ncols=min(len(nodes), 6))
    fig.tight_layout()
    _save(fig, path)


def damage_map(summary: dict, problems: list[dict], files: list[tuple[str, int, int]], path: str) -> None:
    """``store verify``'s findings along the files: ``files`` is (kind, name, size) in order
    of their start offsets; each problem with a file and offset is marked where it lies
    (red: error, orange: warning), what concerns no place is listed below the bars."""
    if not files:
        raise PlotError("nothing to draw: the store has no data or index files")
    fig, (ax,) = _figure(1)
    kinds = ["data", "index"]
    starts: dict[tuple[str, str], int] = {}
    for kind, name, size in files:
        y = kinds.index(kind)
        start = int(name) if name.isdigit() else 0
        starts[(kind, name)] = start
        ax.barh(y, size, left=start, height=0.5, color="#dfe8f3" if len(starts) % 2 else "#c5d5ea",
                edgecolor="#6b7f99", linewidth=0.6)
    placed, unplaced = 0, []
    for p in problems:
        kind, _, name = (p.get("file") or "").partition("/")
        if (kind, name) not in starts or p.get("offset") is None:
            unplaced.append(p)
            continue
        x = starts[(kind, name)] + p["offset"]
        colour = "#d62728" if p["severity"] == "error" else "#ff7f0e"
        y = kinds.index(kind)
        ax.plot([x, x], [y - 0.35, y + 0.35], color=colour, linewidth=2)
        ax.annotate(p["code"] + ("" if p.get("index") is None else f" @{p['index']}"), (x, y + 0.35),
                    xytext=(2, 4 + 9 * (placed % 3)), textcoords="offset points", fontsize=7, color=colour)
        placed += 1
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_ylim(len(kinds) - 0.3, -0.8)
    ax.set_xlabel("byte offset along the files")
    ax.xaxis.set_major_formatter(_bytes_formatter())
    verdict = summary.get("verdict", "?")
    ax.set_title(f"{summary.get('node_dir', '')}: {verdict}, {summary.get('errors', 0)} errors, "
                 f"{summary.get('warnings', 0)} warnings; entries {summary.get('begin_index')}.."
                 f"{summary.get('end_index')}", fontsize=10, color="#d62728" if verdict != "ok" else "black")
    if unplaced:
        text = "\n".join(f"{p['severity']}: {p['code']}: {p['message'][:150]}" for p in unplaced[:6])
        if len(unplaced) > 6:
            text += f"\n... and {len(unplaced) - 6} more"
        ax.text(0.0, -0.12, text, transform=ax.transAxes, fontsize=7, va="top", family="monospace")
    fig.tight_layout()
    if unplaced:
        fig.subplots_adjust(bottom=0.30)
    _save(fig, path)


def _term_colours(terms: list[int]) -> dict[int, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    return {t: cmap(k % 20) for k, t in enumerate(terms)}


def _bytes_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: _human(v))
