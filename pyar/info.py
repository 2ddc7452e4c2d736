"""``pyar info``'s report of every rank at once: rank 0's lines, the others' where they differ,
and one line per node."""

from __future__ import annotations

from .settings import ranges


def summary(lines: list[list[str]], nodes: list[dict]) -> list[str]:
    """The report: ``lines[r]`` are rank r's lines of facts, ``nodes[r]`` its ``host`` and
    ``cuda`` (what it sees of CUDA). Rank 0's lines, each followed by the other ranks'
    version of it where theirs differ (``  ranks 2-3: ...``), then ``node HOST: ranks ...``
    per node, with what its ranks see of CUDA (one line per distinct answer)."""
    out = []
    size = len(lines)
    for i, line in enumerate(lines[0]):
        out.append(line)
        others: dict[str, list[int]] = {}
        for r in range(1, size):
            theirs = lines[r][i] if i < len(lines[r]) else "(no such line)"
            if theirs != line:
                others.setdefault(theirs, []).append(r)
        for theirs, ranks in others.items():
            out.append(f"  rank{'s' if len(ranks) > 1 else ''} {ranges(ranks)}: {theirs}")
    extra = sorted({r for r in range(1, size) if len(lines[r]) > len(lines[0])})
    if extra:
        out.append(f"  ranks {ranges(extra)}: more lines than rank 0's")
    hosts: dict[str, list[int]] = {}
    for r, facts in enumerate(nodes):
        hosts.setdefault(facts["host"], []).append(r)
    out.append(f"nodes: {len(hosts)} ({size} rank{'s' if size > 1 else ''})")
    for host, ranks in hosts.items():
        out.append(f"node {host}: ranks {ranges(ranks)} ({len(ranks)})")
        seen: dict[str, list[int]] = {}
        for r in ranks:
            seen.setdefault(nodes[r]["cuda"], []).append(r)
        for cuda, which in seen.items():
            where = "" if len(seen) == 1 else \
                f"rank{'s' if len(which) > 1 else ''} {ranges(which)}: "
            out.append(f"  {where}{cuda}")
    return out
