"""``pyar doctor DIR``: merge the flight recorder's dumps and say in plain words what happened.

Reads every ``rank<R>.json`` in DIR (:mod:`pyar.runtime.recorder` writes them) and,
per communicator, compares the ranks' records call by call:

- a rank with no dump: ``rank 1 is missing: no dump (it exited early or was
  killed?)``;
- ranks whose call ``#s`` was not the same collective: control flow diverged
  (each side's source line named);
- ranks whose call ``#s`` disagrees on count, dtype, op, root, shape or
  algorithm: ``ranks disagree on allreduce #17: count 4096 on ranks 0-2, 4095
  on rank 3``;
- a rank that never entered the last call the others entered, and where it
  was instead;
- a rank that entered a call long after the others had given up on it (slow);
- every wait that gave up: ``allreduce #88 step 3 on rank 2 waited 31.0 s for
  rank 5``.

:func:`diagnose` returns the lines (the first the verdict); :func:`main` prints them.
"""

from __future__ import annotations

import json
from pathlib import Path

FIELDS = ("count", "dtype", "op", "root", "shape", "algorithm")
LATE = 1.0                  # seconds after the others gave up that makes a rank "late"


def load(folder) -> dict[int, dict]:
    """``{rank: dump}`` of every ``rank<R>.json`` in ``folder`` (ValueError if none, or bad)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a directory (expected PYAR_DUMP_DIR, or the "
                         f"pyar-dump-* folder the flight recorder wrote)")
    dumps = {}
    for path in sorted(folder.glob("rank*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a flight-recorder dump ({e})") from None
        if not isinstance(data, dict) or data.get("format") != "pyar-flight/1":
            raise ValueError(f"{path}: not a flight-recorder dump (format pyar-flight/1)")
        dumps[int(data["rank"])] = data
    if not dumps:
        raise ValueError(f"{folder}: no rank*.json dumps in it")
    return dumps


def ranks_text(ranks) -> str:
    """``rank 3``, ``ranks 0-2``, ``ranks 0, 2, 5-7``."""
    ranks = sorted(set(ranks))
    runs, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            runs.append(f"{start}" if start == r else f"{start}-{r}")
            start = None
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(runs)


def _where(call: dict) -> str:
    caller = call.get("caller")
    if not caller:
        return ""
    path, _, line = caller.rpartition(":")
    return f" at {Path(path).name}:{line}"


def _name(call: dict) -> str:
    return f"{call['collective']} #{call['seq']}"


def diagnose(dumps: dict[int, dict]) -> list[str]:
    """The doctor's findings, most telling first (the first line is the verdict)."""
    size = max(int(d.get("size") or 0) for d in dumps.values())
    size = max(size, max(dumps) + 1)
    missing = sorted(set(range(size)) - set(dumps))
    found: list[tuple[int, str]] = []       # (priority, line)
    for rank in missing:
        found.append((0, f"rank {rank} is missing: no dump (killed, exited early, or it saw "
                         f"no error and no notice reached it)"))
    comms: dict[int, dict[int, dict]] = {}  # comm index -> {comm rank: comm}
    for data in dumps.values():
        for comm in data["comms"]:
            comms.setdefault(comm["index"], {})[comm["rank"]] = comm
    for index in sorted(comms):
        found += _comm(comms[index], missing if index == 0 else [])
    found.sort(key=lambda item: item[0])
    lines = [line for _, line in found]
    if not lines:
        lines = ["no problem found: every rank's calls agree and none failed"]
    reasons = sorted({f"rank {r}: {d['reason']}" + (f" ({d['error']})" if d.get("error")
                                                    else "") for r, d in dumps.items()})
    return lines + ["", "dumps: " + "; ".join(reasons)]


def _comm(ranks: dict[int, dict], missing: list[int]) -> list[tuple[int, str]]:
    out = []
    by_seq: dict[int, dict[int, dict]] = {}
    for rank, comm in ranks.items():
        for call in comm["calls"]:
            by_seq.setdefault(call["seq"], {})[rank] = call
    # the first call the ranks disagree on: what it is, or its arguments
    for seq in sorted(by_seq):
        calls = by_seq[seq]
        kinds: dict[str, list[int]] = {}
        for rank, call in calls.items():
            kinds.setdefault(call["collective"], []).append(rank)
        if len(kinds) > 1:
            sides = ", ".join(f"{kind} on {ranks_text(rs)}{_where(calls[rs[0]])}"
                              for kind, rs in sorted(kinds.items(), key=lambda k: -len(k[1])))
            out.append((1, f"control flow diverged at call #{seq}: {sides}"
                           f"{_odd_one(kinds.values())}"))
            break
        odd, groups = [], []
        for field in FIELDS:
            values: dict[str, list[int]] = {}
            for rank, call in calls.items():
                values.setdefault(json.dumps(call.get(field)), []).append(rank)
            if len(values) > 1 and not groups:
                groups = list(values.values())
            if len(values) > 1 and not (field == "shape" and odd):
                odd.append(", ".join(f"{field} {json.loads(v) if field != 'shape' else v} on "
                                     f"{ranks_text(rs)}"
                                     for v, rs in sorted(values.items(),
                                                         key=lambda k: -len(k[1]))))
        if odd:
            first = next(iter(calls.values()))
            out.append((1, f"ranks disagree on {_name(first)}: {'; '.join(odd)}"
                           f"{_odd_one(groups)}"))
            break
        if len(kinds) > 1:
            break
    # a rank that never entered the last call the others did
    last = {rank: max((c["seq"] for c in comm["calls"]), default=0)
            for rank, comm in ranks.items()}
    if last:
        top = max(last.values())
        entered = by_seq.get(top, {})
        behind = sorted(r for r, s in last.items() if s < top)
        if behind and entered:
            call = next(iter(entered.values()))
            for rank in behind:
                mine = by_seq.get(last[rank], {}).get(rank)
                was = (f"; rank {rank}'s last call was {_name(mine)}{_where(mine)} "
                       f"({mine['state']})" if mine else "")
                out.append((2, f"rank {rank} never entered {_name(call)} (the others entered it"
                               f"{_where(call)}){was}: control flow diverged"))
    # late arrivals: entered a call after the others had given up on it
    late_ones = set()       # (seq, rank): their waits are a consequence, not a cause
    for seq, calls in sorted(by_seq.items()):
        gave_up = [c["began"] + c["seconds"] for c in calls.values() if c["state"] == "failed"
                   and c.get("error") == "TimeoutError"]
        if not gave_up:
            continue
        for rank, call in sorted(calls.items()):
            late = call["began"] - min(gave_up)
            if late > LATE:
                late_ones.add((seq, rank))
                out.append((2, f"rank {rank} entered {_name(call)}{_where(call)} {late:.1f} s "
                               f"after the others had given up on it: a slow rank"))
    # the waits that gave up, and where their chain ends (a rank that waits for no one, or
    # only since it came late)
    waits = {rank: call["peers"] for seq, calls in by_seq.items() for rank, call in calls.items()
             if call["state"] == "failed" and call.get("peers") and (seq, rank) not in late_ones}
    ends = set()
    for start in waits:
        rank, seen = start, set()
        while rank in waits and rank not in seen:
            seen.add(rank)
            rank = waits[rank][0]
        if rank not in waits:
            ends.add(rank)
    if ends:
        out.append((2, f"the waits lead to {ranks_text(ends)}"
                       f"{' (no dump: killed or exited early?)' if ends <= set(missing) else ''}"))
    for seq, calls in sorted(by_seq.items()):
        for rank, call in sorted(calls.items()):
            if call["state"] != "failed":
                continue
            if call.get("peers"):
                waited = call.get("waited", call["seconds"])
                step = f" step {call['step']}" if "step" in call else ""
                who = ranks_text(call["peers"])
                gone = [p for p in call["peers"] if p in missing]
                note = f" ({ranks_text(gone)} left no dump)" if gone else ""
                if "stopped_by" in call:
                    note += f", until rank {call['stopped_by']}'s failure reached it"
                out.append((3, f"{_name(call)}{step} on rank {rank} waited {waited:.1f} s for "
                               f"{who}{note}"))
            elif "stopped_by" in call:
                out.append((4, f"{_name(call)} on rank {rank} stopped: rank "
                               f"{call['stopped_by']} failed"))
            else:
                out.append((4, f"{_name(call)} failed on rank {rank}: {call.get('error')}: "
                               f"{call.get('message', '')}"))
    return out


def _odd_one(groups) -> str:
    """``; the odd one out: rank 3`` when one side is a single rank and the others agree."""
    groups = sorted((sorted(g) for g in groups), key=len)
    if len(groups) >= 2 and len(groups[0]) == 1 and len(groups[1]) > 1:
        return f"; the odd one out: rank {groups[0][0]}"
    return ""


def main(folder) -> int:
    """Print the diagnosis of the dumps in ``folder``; 0."""
    for line in diagnose(load(folder)):
        print(line)
    return 0
