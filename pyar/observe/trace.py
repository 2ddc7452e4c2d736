"""The timeline: ``PYAR_TRACE=trace.json`` writes a Chrome/Perfetto trace of every call.

The file is in the Trace Event format (viewable in https://ui.perfetto.dev
and chrome://tracing): one process per rank, a complete event (``"ph":
"X"``) per collective call with its arguments, the algorithm and why it
was chosen, and nested in it one per step (its peers and bytes), itself
split into ``post`` (posting the transfers), ``wait`` (until they are
complete) and ``fold`` (folding and copying what arrived). Nonblocking
calls in flight together go on threads of their own.

Clocks: when the first Comm is made (its ranks agreed that PYAR_TRACE is set
on all of them or on none: :mod:`pyar.runtime.settings`), they pass three barriers;
each takes its clock's zero as it leaves the last one, so timestamps of
different ranks line up to within a barrier's exit skew (microseconds on one
node). At exit each rank writes ``<file>.rank<R>.part``; rank 0 waits up to
:data:`MERGE_SECONDS` for the others' and merges them into ``<file>`` (``pyar
trace FILE`` merges parts left behind). Tracing takes every call off the
runtime's lean paths (it listens on the event hook); at most
:data:`MAX_EVENTS` events are kept per rank (the file says how many were
dropped).

``pyar trace FILE`` checks and summarizes it, ``--plot timeline.png`` draws it
(:mod:`pyar.cli.trace`).
"""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path

from mpi4py import MPI

from ..model import tuner
from ..runtime import progress, recorder
from ..runtime.comm import Comm
from .log import count_of, peers_and_bytes

MAX_EVENTS = 200_000
MERGE_SECONDS = 10.0
_state: dict = {}           # path, rank, size, zero, events, dropped, steps, lanes


def path_set() -> str:
    return os.environ.get("PYAR_TRACE", "").strip()


def comm_made(c) -> None:
    """A Comm was made: on the first, with PYAR_TRACE set, align the clocks (collective)."""
    if "agreed" in _state:
        return
    _state["agreed"] = True
    path = path_set()               # (set on every rank or on none: pyar.runtime.settings agreed)
    if not path:
        return
    for _ in range(3):
        c.mpi.Barrier()
    zero = recorder.clock()
    world = MPI.COMM_WORLD
    _state.update(path=path, rank=world.Get_rank(), size=world.Get_size(), zero=zero,
                  events=[], dropped=0, steps={}, lanes=[])
    progress.listen(_on_event)
    atexit.register(finish)


def _us(t: float) -> float:
    return round((t - _state["zero"]) * 1e6, 3)


def _emit(event: dict) -> None:
    events = _state["events"]
    if len(events) < MAX_EVENTS:
        events.append(event)
    else:
        _state["dropped"] += 1


def _on_event(event, run, index) -> None:
    now = recorder.clock()
    steps = _state["steps"]
    key = id(run)
    if event == "start":
        times = steps.get(key)
        if times is None:                   # the run's first event: take a lane
            lanes = _state["lanes"]
            lane = lanes.index(None) if None in lanes else len(lanes)
            if lane == len(lanes):
                lanes.append(None)
            lanes[lane] = key
            times = steps[key] = {"lane": lane}
        times["start"] = now
    elif event in ("post", "ready"):
        steps.setdefault(key, {"lane": 0})[event] = now
    elif event == "complete":
        times = steps.get(key, {})
        _step(run, index, times, now)
    elif event == "done":
        times = steps.pop(key, {"lane": 0})
        lanes = _state["lanes"]
        if times["lane"] < len(lanes) and lanes[times["lane"]] == key:
            lanes[times["lane"]] = None
        _call(run, times["lane"], now)


def _step(run, index, times, now) -> None:
    start = times.get("start", now)
    post, ready = times.get("post", start), times.get("ready", now)
    tid, pid = times.get("lane", 0), _state["rank"]
    peers, sent, received = peers_and_bytes(run.steps[index], run.ctx)
    _emit({"name": f"step {index}", "cat": "step", "ph": "X", "ts": _us(start),
           "dur": max(_us(now) - _us(start), 0.0), "pid": pid, "tid": tid,
           "args": {"peers": peers, "sent": sent, "received": received}})
    for name, a, b in (("post", start, post), ("wait", post, ready), ("fold", ready, now)):
        _emit({"name": name, "cat": name, "ph": "X", "ts": _us(a),
               "dur": max(_us(b) - _us(a), 0.0), "pid": pid, "tid": tid})


def _call(run, lane, now) -> None:
    entry, comm = run.record if run.record is not None else (None, None)
    args = {"what": run.what, "state": "failed" if run.error is not None else "done"}
    began = now
    name = run.what.split(" on rank")[0]
    if entry is not None:
        seq, (collective, op, dtype, count, shape, root, algorithm), code, line, began, *_ = \
            entry
        name = f"{collective} #{seq}"
        args.update(seq=seq, collective=collective, op=op, dtype=dtype, count=count,
                    shape=list(shape), root=root, algorithm=algorithm,
                    why=tuner.reason(collective, entry[recorder.ASKED], comm.size,
                                     count_of(collective, count, comm.size), dtype,
                                     comm.topology),
                    caller=f"{code.co_filename}:{recorder.line_of(code, line)}")
    if run.error is not None:
        args["error"] = f"{type(run.error).__name__}: {run.error}"
    _emit({"name": name, "cat": "collective", "ph": "X", "ts": _us(began),
           "dur": max(_us(now) - _us(began), 0.0), "pid": _state["rank"], "tid": lane,
           "args": args})


def part_path(path, rank: int) -> Path:
    return Path(f"{path}.rank{rank}.part")


def finish() -> Path | None:
    """Write this rank's part; on rank 0 merge every rank's into the trace file (at exit)."""
    if "path" not in _state:
        return None
    progress.unlisten(_on_event)
    path, rank, size = _state["path"], _state["rank"], _state["size"]
    meta = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
             "args": {"name": f"rank {rank}"}},
            {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
             "args": {"sort_index": rank}}]
    part = {"rank": rank, "size": size, "dropped": _state["dropped"],
            "events": meta + _state["events"]}
    target = part_path(path, rank)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(part))
    tmp.replace(target)
    _state.clear()
    _state["agreed"] = True
    if rank != 0:
        return None
    deadline = time.monotonic() + MERGE_SECONDS
    while time.monotonic() < deadline and not all(part_path(path, r).exists()
                                                  for r in range(size)):
        time.sleep(0.05)
    return merge(path, size)


def merge(path, size: int | None = None) -> Path:
    """Merge the parts ``<path>.rank<R>.part`` into ``path`` (Trace Event JSON) and remove
    them; ``size``: the ranks expected (None: those found). ValueError if there are none."""
    path = Path(path)
    found = sorted(path.parent.glob(path.name + ".rank*.part"))
    parts = [json.loads(p.read_text()) for p in found]
    if not parts:
        raise ValueError(f"{path}: no trace parts ({path.name}.rank<R>.part) to merge")
    size = size or max(p["size"] for p in parts)
    events = [e for p in parts for e in p["events"]]
    have = sorted(p["rank"] for p in parts)
    data = {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "pyar", "ranks": size, "merged": have,
                          "missing": sorted(set(range(size)) - set(have)),
                          "dropped": sum(p["dropped"] for p in parts),
                          "clock": "microseconds since the ranks left a common barrier"}}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
    for p in found:
        p.unlink()
    return path


def load(path) -> dict:
    """The trace at ``path`` (merging parts left behind first, if the file is missing)."""
    path = Path(path)
    if not path.exists():
        merge(path)
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not a JSON trace ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: expected a Trace Event JSON object with traceEvents")
    return data


def check(data: dict) -> list[str]:
    """What is wrong with ``data`` as Trace Event JSON (the keys every event needs, X events'
    durations, B/E pairs balanced per thread); empty if nothing."""
    problems, open_spans = [], {}
    for i, e in enumerate(data.get("traceEvents", [])):
        missing = [k for k in ("ph", "name", "pid", "tid") if k not in e]
        if e.get("ph") != "M" and "ts" not in e:
            missing.append("ts")
        if missing:
            problems.append(f"event {i}: no {', '.join(missing)}")
            continue
        if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            problems.append(f"event {i} ({e['name']}): X without a duration >= 0")
        if e["ph"] == "B":
            open_spans.setdefault((e["pid"], e["tid"]), []).append(e["name"])
        if e["ph"] == "E" and not open_spans.get((e["pid"], e["tid"])):
            problems.append(f"event {i}: E without its B")
        elif e["ph"] == "E":
            open_spans[e["pid"], e["tid"]].pop()
    problems += [f"pid {pid} tid {tid}: B without E ({names})"
                 for (pid, tid), names in open_spans.items() if names]
    return problems


def summary(data: dict) -> list[str]:
    """A few lines on the trace: per rank its calls and time in them, the longest waits."""
    calls: dict = {}
    waits = []
    for e in data["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "collective":
            n, t = calls.get(e["pid"], (0, 0.0))
            calls[e["pid"]] = (n + 1, t + e["dur"])
        elif e.get("cat") == "wait":
            waits.append(e)
    lines = [f"rank {pid}: {n} calls, {t / 1e3:.3f} ms in them" for pid, (n, t) in
             sorted(calls.items())]
    for e in sorted(waits, key=lambda e: -e["dur"])[:3]:
        lines.append(f"longest wait: rank {e['pid']} at {e['ts'] / 1e3:.3f} ms, "
                     f"{e['dur']:.1f} us")
    return lines


Comm.on_made.append(comm_made)
