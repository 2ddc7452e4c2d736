"""``pyar trace FILE``: check and summarize a ``PYAR_TRACE`` timeline (:mod:`pyar.observe.trace`);
``--plot`` draws it."""

from __future__ import annotations

from ..observe.trace import check, load, summary
from .plot import pyplot


def main(args) -> int:
    """``pyar trace FILE [--plot PNG]``: check the trace, summarize it, draw it."""
    path, png = args.file, args.plot
    data = load(path)
    problems = check(data)
    for line in problems[:20]:
        print(f"invalid: {line}")
    other = data.get("otherData", {})
    print(f"{path}: {len(data['traceEvents'])} events, ranks {other.get('merged', '?')}"
          f"{', missing ' + str(other['missing']) if other.get('missing') else ''}"
          f"{', dropped ' + str(other['dropped']) if other.get('dropped') else ''}")
    for line in summary(data):
        print(line)
    if png:
        plot(data, png)
        print(f"# plot: {png}")
    return 1 if problems else 0



def plot(data: dict, png, width: float = 12.0) -> None:
    """Draw the timeline: a row per rank, a bar per call (colour: collective), its steps'
    waits darker beneath."""
    plt = pyplot()
    spans = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in spans}) or [0]
    kinds = sorted({e["name"].split(" #")[0] for e in spans if e.get("cat") == "collective"})
    colours = {k: plt.cm.tab10(i % 10) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(width, 1.0 + 0.6 * len(ranks)))
    bars: dict = {}             # (row, kind) -> its bars: one collection each (a call per
    row_of = {rank: row for row, rank in enumerate(ranks)}   # bar took minutes at 10**5)
    for e in spans:
        kind = e["name"].split(" #")[0] if e.get("cat") == "collective" else \
            "wait" if e.get("cat") == "wait" else None
        if kind is not None:
            bars.setdefault((row_of[e["pid"]], kind), []).append(
                (e["ts"] / 1e3, max(e["dur"] / 1e3, 1e-6)))
    for (row, kind), ranges in bars.items():
        if kind == "wait":
            ax.broken_barh(ranges, (row + 0.15, 0.25), facecolors="0.35")
        else:
            ax.broken_barh(ranges, (row - 0.4, 0.5), facecolors=colours[kind])
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(-0.6, len(ranks) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms since the common barrier)")
    ax.set_title("pyar timeline: calls (colour by collective), waits (grey, below)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds]
    handles.append(plt.Rectangle((0, 0), 1, 1, color="0.35"))
    ax.legend(handles, kinds + ["wait"], loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
