"""Pictures of a store or a group, as PNG files (matplotlib, its Agg canvas: no display and
no pyplot state), and the lag sparklines of ``peer watermarks --watch``.

Each figure has a fixed size (WIDTH x HEIGHT pixels), so scripts and tests know what they
get. The data comes in as the rows the commands print; nothing here reads a store.
"""

from __future__ import annotations

import os

WIDTH, HEIGHT, DPI = 1200, 700, 100
SPARKS = "▁▂▃▄▅▆▇█"
_HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--", "++")
MIN_TERM_SHARE = 0.02  # of the index axis: the least width a term is drawn with (about 20 pixels)


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


def term_layout(rows: list[dict], node: str):
    """Where ``node``'s terms are drawn on the index axis: (row, left, width, widened), in
    index order. A term narrower than MIN_TERM_SHARE of the whole axis (every node's) is drawn
    that wide, centred on its place, and pushes what follows it right, so terms never cover
    each other and every one can be seen."""
    lo, hi = min(r["first_index"] for r in rows), max(r["last_index"] for r in rows)
    least = (hi - lo + 1) * MIN_TERM_SHARE
    cursor = float("-inf")
    for r in sorted((r for r in rows if r["node"] == node), key=lambda r: r["first_index"]):
        width = r["last_index"] - r["first_index"] + 1
        short = width < least
        left = max(cursor, r["first_index"] - (least - width) / 2 if short else r["first_index"])
        drawn = least if short else max(least, r["last_index"] + 1 - left)
        cursor = left + drawn
        yield r, left, drawn, short


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
        shorts = 0
        for r, left, drawn, short in term_layout(rows, node):
            top.barh(y, drawn, left=left, height=0.6, color=cmap[r["term"]], edgecolor="black",
                     linewidth=1.2 if short else 0.4)
            if len(terms) > 40:
                continue
            if short:  # (labelled outside, above and below in turn: the bar is too narrow for it)
                above = shorts % 2 == 0
                shorts += 1
                top.annotate(f"{r['term']} ({r['last_index'] - r['first_index'] + 1})",
                             (left + drawn / 2, y - 0.3 if above else y + 0.3), xytext=(0, 1 if above else -1),
                             textcoords="offset points", ha="center", va="bottom" if above else "top", fontsize=7,
                             annotation_clip=False)
            else:
                top.text(left + drawn / 2, y, str(r["term"]), ha="center", va="center", fontsize=7, clip_on=True)
    top.set_yticks(range(len(nodes)), [os.path.basename(n.rstrip("/")) or n for n in nodes])
    top.invert_yaxis()
    top.set_xlabel("entry index")
    top.set_title((title + ": " if title else "") + "leader history (each term's index range; labels: term; "
                  "a term too short to see is widened, labelled with its entry count)")
    from matplotlib.patches import Patch

    width = 0.8 / len(nodes)
    legend = []
    for k, node in enumerate(nodes):  # (a term's colour as above; a hatch per node)
        by_term = {r["term"]: r["bytes"] for r in rows if r["node"] == node}
        xs = [i + (k - (len(nodes) - 1) / 2) * width for i in range(len(terms))]
        hatch = _HATCHES[k % len(_HATCHES)]
        bottom.bar(xs, [by_term.get(t, 0) for t in terms], width=width, color=[cmap[t] for t in terms],
                   edgecolor="black", linewidth=0.4, hatch=hatch)
        legend.append(Patch(facecolor="white", edgecolor="black", hatch=hatch,
                            label=os.path.basename(node.rstrip("/")) or node))
    step = max(1, len(terms) // 30)
    bottom.set_xticks(range(0, len(terms), step), [str(t) for t in terms[::step]])
    bottom.set_xlabel("term")
    sizes = [r["bytes"] for r in rows if r["bytes"] > 0]
    logged = bool(sizes) and max(sizes) / min(sizes) >= 100  # (terms of very different sizes: each one readable)
    if logged:
        bottom.set_yscale("log")
    bottom.set_ylabel("bytes" + (" (log scale)" if logged else ""))
    bottom.yaxis.set_major_formatter(_bytes_formatter())
    bottom.set_title("bytes per term" + (" (log scale: the terms differ by orders of magnitude)" if logged else ""))
    bottom.legend(handles=legend, fontsize=8, ncols=min(len(nodes), 6))
    fig.tight_layout()
    _save(fig, path)


def damage_map(summary: dict, problems: list[dict], files: list[tuple[str, int, int]], path: str) -> None:
    """``store verify``'s findings along the files: ``files`` is (kind, name, size) in order
    of their start offsets. Data files above, index files below, each problem with a file
    and offset marked where it lies (red: error, orange: warning); what a node's start would
    cut is shaded; problems of no place (the checkpoint, the directory) are listed below."""
    import textwrap

    if not files:
        raise PlotError("nothing to draw: the store has no data or index files")
    fig, axes = _figure(2)
    kinds = ["data", "index"]
    starts: dict[tuple[str, str], int] = {}
    ends = {k: 0 for k in kinds}
    for kind, name, size in files:
        ax = axes[kinds.index(kind)]
        start = int(name)
        starts[(kind, name)] = start
        ends[kind] = max(ends[kind], start + size)
        ax.barh(0, size, left=start, height=0.5, color="#dfe8f3" if len(starts) % 2 else "#c5d5ea",
                edgecolor="#6b7f99", linewidth=0.6)
        ax.text(start, -0.3, name.lstrip("0") or "0", fontsize=6, color="#6b7f99", va="bottom", clip_on=True)
    marks: dict[int, float] = {}  # entry index -> where its data problem lies
    unplaced, placed = [], 0
    for p in problems:
        kind, _, name = (p.get("file") or "").partition("/")
        if (kind, name) not in starts or p.get("offset") is None:
            unplaced.append(p)
            continue
        x = starts[(kind, name)] + p["offset"]
        if kind == "data" and p.get("index") is not None:
            marks.setdefault(p["index"], x)
        colour = "#d62728" if p["severity"] == "error" else "#ff7f0e"
        ax = axes[kinds.index(kind)]
        ax.plot([x, x], [-0.3, 0.3], color=colour, linewidth=2)
        ax.annotate(p["code"] + ("" if p.get("index") is None else f" (entry {p['index']})"), (x, 0.3),
                    xytext=(2, 3 + 9 * (placed % 3)), textcoords="offset points", fontsize=7, color=colour)
        placed += 1
    for p in problems:
        if p["code"].startswith("start-drops") and p.get("index") in marks:
            x = marks[p["index"]]
            axes[0].axvspan(x, ends["data"], color="#d62728" if p["severity"] == "error" else "#ff7f0e",
                            alpha=0.15, hatch="//")
            axes[0].text(x, -0.42, " a start would cut from here" + (" (committed entries)" if
                         p["severity"] == "error" else ""), fontsize=8, color="#d62728", va="bottom")
    for ax, kind in zip(axes, kinds):
        ax.set_yticks([])
        ax.set_ylim(0.55, -0.45)
        ax.set_xlim(0, max(ends[kind], 1))
        ax.set_ylabel(f"{kind} files")
        ax.xaxis.set_major_formatter(_bytes_formatter())
    axes[1].set_xlabel("byte offset along the files (labels: file names, their first offset)")
    verdict = summary.get("verdict", "?")
    axes[0].set_title(f"{summary.get('node_dir', '')}: {verdict}, {summary.get('errors', 0)} errors, "
                      f"{summary.get('warnings', 0)} warnings; entries {summary.get('begin_index')}.."
                      f"{summary.get('end_index')}", fontsize=10, color="#d62728" if verdict != "ok" else "black")
    fig.tight_layout()
    if unplaced:
        lines = []
        for p in unplaced[:4]:
            lines += textwrap.wrap(f"{p['severity']}: {p['code']}: {p['message']}", 170)[:3]
        if len(unplaced) > 4:
            lines.append(f"... and {len(unplaced) - 4} more")
        fig.subplots_adjust(bottom=0.1 + 0.025 * len(lines))
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", family="monospace")
    _save(fig, path)


def _term_colours(terms: list[int]) -> dict[int, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    return {t: cmap(k % 20) for k, t in enumerate(terms)}


def _bytes_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: _human(v))
