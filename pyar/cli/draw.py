"""Seeing a schedule: ``pyar draw`` as a picture (ranks as lanes, steps as columns) or a table.

Steps are placed in columns as soon as they can run: a step completes one column after
the later of its rank's previous step and the steps at which its peers posted the
matching transfers. What each rank holds is followed symbolically: rank r contributes
``r``; a folding receive joins the contributions (``0+2`` is the fold of ranks 0 and 2),
a copying one replaces them. The table, for ring on 3 ranks of one element per rank
(``+`` after a chunk marks a fold, ``=`` a copy; ``s[..)`` is scratch)::

    >>> import pyar
    >>> print(table(pyar.schedule("ring", 3, 3)))
    # ring allreduce: 3 ranks, 3 elements (rank r contributes r; 0+2 = ranks 0 and 2 folded)
    start
      rank 0: 0 | 0 | 0
      rank 1: 1 | 1 | 1
      rank 2: 2 | 2 | 2
    step 1: 0->1 [2:3)+  1->2 [0:1)+  2->0 [1:2)+
      rank 0: 0 | 0+2 | 0
      rank 1: 1 | 1 | 0+1
      rank 2: 1+2 | 2 | 2
    step 2: 0->1 [1:2)+  1->2 [2:3)+  2->0 [0:1)+
      rank 0: 0+1+2 | 0+2 | 0
      rank 1: 1 | 0+1+2 | 0+1
      rank 2: 1+2 | 2 | 0+1+2
    step 3: 0->1 [0:1)=  1->2 [1:2)=  2->0 [2:3)=
      rank 0: 0+1+2 | 0+2 | 0+1+2
      rank 1: 0+1+2 | 0+1+2 | 0+1
      rank 2: 1+2 | 0+1+2 | 0+1+2
    step 4: 0->1 [2:3)=  1->2 [0:1)=  2->0 [1:2)=
      rank 0: 0+1+2 | 0+1+2 | 0+1+2
      rank 1: 0+1+2 | 0+1+2 | 0+1+2
      rank 2: 0+1+2 | 0+1+2 | 0+1+2
    sent per rank (elements): 0: 4, 1: 4, 2: 4

The last state is what the simulator computes when rank r passes ``2**r`` (sums of
distinct powers of two are the sets):

    >>> import numpy as np
    >>> s = pyar.schedule("double_binary_tree", 5, 7)
    >>> sim = pyar.simulate(s, [np.full(7, 1 << r, np.uint64) for r in range(5)]).outputs
    >>> [list(map(int, o)) for o in sim] == [list(m) for m in final(s)]
    True
"""

from __future__ import annotations

import sys

import numpy as np

import pyar
from .. import collectives
from ..algorithms import msccl
from ..core.schedule import Send
from .plot import pyplot

MAX_RANKS = 62          # contributions are bits of an int64


def timeline(schedule):
    """``(columns, states, sent)``: per column (1-based) its transfers ``(src, dst, chunk,
    reduce)``; per column (0 = the start) each rank's ``{"data", "scratch"}`` contribution
    masks; per rank the elements it sends to other ranks (a message to itself is a local
    copy, no traffic, as the simulator counts it)."""
    size, count = schedule.size, schedule.count
    if size > MAX_RANKS:
        raise ValueError(f"the table and the picture of arrows follow contributions as bits: "
                         f"at most {MAX_RANKS} ranks, got {size} (the heatmap, drawn for more "
                         f"ranks, has no limit)")
    record = collectives.collective(schedule.collective)
    steps = [schedule.steps(r) for r in range(size)]
    match = _match(steps)
    done = _times(steps, match)
    x_size = record.x_size(count, size)
    masks = [{"data": record.load(np.full(x_size, 1 << r, np.int64), r, size),
              "scratch": np.zeros(schedule.scratch_count(r), np.int64)} for r in range(size)]
    sent = [0] * size
    mail = {}                    # (src, dst, k) -> payload snapshot
    last = max((t for ts in done for t in ts), default=0)
    columns = [[] for _ in range(last + 1)]
    states = [[{k: v.copy() for k, v in m.items()} for m in masks]]

    def begin(r, i):             # post step i: snapshot what it sends
        if i < len(steps[r]):
            for op, key in zip(steps[r][i].ops, match[r][i]):
                if type(op) is Send:
                    c = op.chunk
                    mail[key] = masks[r][c.buffer][c.lo:c.hi].copy()
                    if op.peer != r:
                        sent[r] += c.hi - c.lo

    for r in range(size):
        begin(r, 0)
    for t in range(1, last + 1):
        finishing = [(r, i) for r in range(size) for i, d in enumerate(done[r]) if d == t]
        for r, i in finishing:
            for op, key in zip(steps[r][i].ops, match[r][i]):
                if type(op) is not Send:
                    c = op.chunk
                    buf = masks[r][c.buffer]
                    payload = mail.pop(key)
                    buf[c.lo:c.hi] = (buf[c.lo:c.hi] | payload) if op.reduce else payload
                    columns[t].append((op.peer, r, c, op.reduce))
        for r, i in finishing:
            begin(r, i + 1)
        states.append([{k: v.copy() for k, v in m.items()} for m in masks])
    return columns, states, sent


def _match(steps):
    """Per rank, per step, per transfer: its channel key ``(src, dst, k)`` (the k-th message
    from src to dst, as MPI matches them)."""
    counter = {}
    keys = []
    for r, mine in enumerate(steps):
        keys.append([])
        for step in mine:
            row = []
            for op in step.ops:
                src, dst = (r, op.peer) if type(op) is Send else (op.peer, r)
                side = (src, dst, type(op) is Send)
                k = counter.get(side, 0)
                counter[side] = k + 1
                row.append((src, dst, k))
            keys[r].append(row)
    return keys


def _times(steps, match):
    """The column each step completes in (see the module docstring)."""
    where = {}                   # (key, is_send) -> (rank, step)
    for r, mine in enumerate(steps):
        for i, step in enumerate(mine):
            for op, key in zip(step.ops, match[r][i]):
                where[key, type(op) is Send] = (r, i)
    done = [[None] * len(s) for s in steps]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    visiting = set()

    def time(r, i):              # the column step i of rank r completes in
        if i < 0:
            return 0
        if done[r][i] is None:
            if (r, i) in visiting:
                raise ValueError(f"the schedule deadlocks: rank {r} step {i} waits on itself")
            visiting.add((r, i))
            start = time(r, i - 1)
            for op, key in zip(steps[r][i].ops, match[r][i]):
                peer = where.get((key, type(op) is not Send))
                if peer is None:
                    raise ValueError(f"rank {r} step {i}: {type(op).__name__} with peer "
                                     f"{op.peer} is never matched")
                start = max(start, time(peer[0], peer[1] - 1))
            done[r][i] = start + 1
            visiting.discard((r, i))
        return done[r][i]

    for r, mine in enumerate(steps):
        for i in range(len(mine)):
            time(r, i)
    return done


def final(schedule):
    """Each rank's data contribution masks after the schedule (ints; bit r: rank r's)."""
    return [state["data"].tolist() for state in timeline(schedule)[1][-1]]


def label(mask: int) -> str:
    """``0+2`` for ranks 0 and 2; ``-`` for nothing."""
    ranks = [str(r) for r in range(MAX_RANKS) if mask >> r & 1]
    return "+".join(ranks) if ranks else "-"


def holds(data, limit: int = 16) -> str:
    """What a buffer holds: element by element up to ``limit``, else runs ``[lo:hi) label``."""
    if len(data) <= limit:
        return " | ".join(label(int(m)) for m in data)
    runs, lo = [], 0
    for i in range(1, len(data) + 1):
        if i == len(data) or data[i] != data[lo]:
            runs.append(f"[{lo}:{i}) {label(int(data[lo]))}")
            lo = i
    return " | ".join(runs)


def _chunk(c) -> str:
    return f"{'s' if c.buffer == 'scratch' else ''}[{c.lo}:{c.hi})"


def table(schedule) -> str:
    """The per-step text table of ``schedule`` (see the module docstring)."""
    columns, states, sent = timeline(schedule)
    size = schedule.size
    lines = [f"# {schedule.algorithm} {schedule.collective}: {size} ranks, {schedule.count} "
             f"elements (rank r contributes r; 0+2 = ranks 0 and 2 folded)"]
    for t, state in enumerate(states):
        if t == 0:
            lines.append("start")
        else:
            moves = sorted(columns[t], key=lambda m: (m[0], m[1]))
            lines.append(f"step {t}: " + "  ".join(
                f"{s}->{d} {_chunk(c)}{'+' if reduce else '='}" for s, d, c, reduce in moves))
        for r in range(size):
            scratch = state[r]["scratch"]
            extra = f"   scratch: {holds(scratch)}" if scratch.size else ""
            lines.append(f"  rank {r}: {holds(state[r]['data'])}{extra}")
    lines.append("sent per rank (elements): " + ", ".join(f"{r}: {n}"
                                                          for r, n in enumerate(sent)))
    return "\n".join(lines)


def picture(schedule, path: str, itemsize: int = 4) -> None:
    """Draw ``schedule`` to ``path`` (.png or .svg): ranks as lanes, columns as steps, an
    arrow per message labelled with its chunk (red, ending in a dot: a fold; blue: a copy),
    bytes sent per rank (at ``itemsize`` bytes an element) in the right margin."""
    plt = pyplot()
    columns, states, sent = timeline(schedule)
    size, steps = schedule.size, len(columns) - 1
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 * steps + 3), max(2.5, 0.8 * size + 1.2)))
    for r in range(size):
        ax.axhline(r, color="0.85", lw=1, zorder=0)
        ax.text(-0.15, r, f"rank {r}", ha="right", va="center", fontsize=9)
        ax.text(steps + 0.35, r, f"{sent[r] * itemsize} B", ha="left", va="center",
                fontsize=8, color="0.3")
    ax.text(steps + 0.35, size - 0.4, "sent", ha="left", va="center", fontsize=8,
            color="0.3")
    for t in range(1, steps + 1):
        ax.axvline(t, color="0.93", lw=0.8, zorder=0)
        for s, d, c, reduce in columns[t]:
            color = "tab:red" if reduce else "tab:blue"
            ax.annotate("", xy=(t, d), xytext=(t - 0.8, s),
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=1.2,
                                        shrinkA=2, shrinkB=4))
            ax.text(t - 0.4, (s + d) / 2, _chunk(c), fontsize=7, ha="center", va="center",
                    color=color, bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none"))
            if reduce:
                ax.plot([t], [d], "o", color=color, ms=5)
    ax.set_xlim(-1.2, steps + 1.2)
    ax.set_ylim(size - 0.5, -0.8)
    ax.set_xticks(range(1, steps + 1))
    ax.set_xlabel("step")
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{schedule.algorithm} {schedule.collective}: {size} ranks, "
                 f"{schedule.count} elements (red dot: fold, blue: copy)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sent_per_step(schedule, itemsize: int = 4) -> np.ndarray:
    """``bytes[rank, step]``: what each rank sends at each step of its own list (0 past its
    last step), from the schedule's table (:meth:`Schedule.table`, what the simulator reads):
    no data moved, any rank count the simulator runs."""
    t = schedule.table()
    out = np.zeros((schedule.size, int(t.nsteps.max(initial=0))), np.int64)
    np.add.at(out, (t.rank[t.send], t.step[t.send]), (t.hi - t.lo)[t.send] * itemsize)
    return out


def heatmap(schedule, path: str, itemsize: int = 4) -> None:
    """Draw ``schedule`` as a step x rank heatmap: a cell per rank and step of its own list,
    coloured by the bytes it sends there (white: nothing), beside each rank's total. For
    rank counts beyond what arrows can show."""
    plt = pyplot()
    sent = sent_per_step(schedule, itemsize)
    size, steps = sent.shape
    fig, (ax, side) = plt.subplots(1, 2, figsize=(10, 6), sharey=True,
                                   gridspec_kw={"width_ratios": [5, 1]})
    shown = np.ma.masked_equal(sent, 0)
    image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap="viridis",
                      extent=(0.5, steps + 0.5, size - 0.5, -0.5))
    fig.colorbar(image, ax=side, label="bytes sent in the step")
    ax.set_xlabel("step (of each rank's own list)")
    ax.set_ylabel("rank")
    total = sent.sum(axis=1)
    side.barh(np.arange(size), total, height=1.0, color="0.4")
    side.set_xlabel("bytes sent in all")
    ax.set_title(f"{schedule.algorithm} {schedule.collective}: {size} ranks, "
                 f"{schedule.count} elements of {itemsize} B, {steps} steps at most",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args) -> int:
    """``pyar draw``: what the command line asked."""
    msccl.load_all(args.load)
    if args.nranks < 1:
        raise ValueError(f"--ranks must be >= 1, got {args.nranks}")
    count = args.nranks if args.count is None else args.count
    if count < 0:
        raise ValueError(f"--count must be >= 0, got {count}")
    schedule = pyar.schedule(args.algo, args.nranks, count, collective=args.collective)
    if args.table:
        print(table(schedule))
        return 0
    path = args.output or f"{args.algo}-{args.nranks}.png"
    if not path.endswith((".png", ".svg")):
        raise ValueError(f"--output must name a .png or .svg file, got {path!r}")
    if args.heatmap or args.nranks > MAX_RANKS:
        heatmap(schedule, path)
    else:
        picture(schedule, path)
    print(f"# wrote {path}")
    return 0
