"""The timeline (PYAR_TRACE): the merged file is valid Trace Event JSON, one process per rank,
a span per call with its arguments and algorithm, steps nested in it, clocks aligned across
ranks; pyar trace checks, merges and draws it."""

import json
import subprocess
import sys

from observed import observed
from pyar.observe import trace


def spans(data, cat):
    return [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_the_merged_trace_is_valid_trace_event_json_with_a_process_per_rank():
    folder, _ = observed()
    data = json.loads((folder / "trace.json").read_text())
    assert trace.check(data) == []
    assert not list(folder.glob("trace.json.rank*.part"))          # merged, then removed
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    assert data["otherData"]["merged"] == [0, 1] and data["otherData"]["missing"] == []


def test_a_span_per_call_with_its_arguments_and_steps_nested_in_it():
    folder, _ = observed()
    data = json.loads((folder / "trace.json").read_text())
    calls = spans(data, "collective")
    for rank in (0, 1):
        mine = sorted((e for e in calls if e["pid"] == rank), key=lambda e: e["args"]["seq"])
        assert [e["name"] for e in mine] == ["allreduce #1", "allreduce #2", "allreduce #3",
                                             "bcast #4", "allreduce #5"]
        ring = mine[1]["args"]
        assert ring["algorithm"] == "ring" and ring["why"] == "explicit argument"
        assert ring["count"] == 16 and ring["dtype"] == "float32" and ring["op"] == "sum"
        assert mine[0]["args"]["why"].startswith("auto: ")
        assert mine[3]["args"]["root"] == 1
        steps = [e for e in spans(data, "step") if e["pid"] == rank]
        for call in mine:
            inside = [s for s in steps if s["tid"] == call["tid"] and
                      call["ts"] <= s["ts"] and s["ts"] + s["dur"] <= call["ts"] + call["dur"]]
            assert inside, call
        assert len([s for s in steps if mine[1]["ts"] <= s["ts"] <= mine[1]["ts"] +
                    mine[1]["dur"]]) == 2          # ring on 2 ranks: two steps
        for part in ("post", "wait", "fold"):
            assert len([e for e in spans(data, part) if e["pid"] == rank]) == len(steps)


def test_clocks_are_aligned_no_rank_ends_an_allreduce_before_its_peer_began_it():
    folder, _ = observed()
    data = json.loads((folder / "trace.json").read_text())
    by_seq = {}
    for e in spans(data, "collective"):     # (a bcast's root may end before a leaf begins)
        if e["args"]["collective"] == "allreduce":
            by_seq.setdefault(e["args"]["seq"], []).append(e)
    for seq, pair in by_seq.items():
        assert len(pair) == 2
        last_start = max(e["ts"] for e in pair)
        first_end = min(e["ts"] + e["dur"] for e in pair)
        assert last_start <= first_end + 1000, pair          # 1 ms: barrier exit skew


def test_check_finds_what_is_wrong():
    bad = {"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 1},
                           {"ph": "B", "name": "b", "pid": 0, "tid": 0, "ts": 2},
                           {"ph": "E", "name": "c", "pid": 1, "tid": 0, "ts": 3},
                           {"ph": "X", "name": "d", "pid": 0, "ts": 1, "dur": 1}]}
    problems = trace.check(bad)
    assert any("X without a duration" in p for p in problems)
    assert any("E without its B" in p for p in problems)
    assert any("B without E" in p for p in problems)
    assert any("no tid" in p for p in problems)


def test_pyar_trace_merges_parts_left_behind_checks_and_draws(tmp_path):
    folder, _ = observed()
    data = json.loads((folder / "trace.json").read_text())
    for rank in (0, 1):          # as if rank 0 had not lived to merge them
        events = [e for e in data["traceEvents"] if e["pid"] == rank]
        trace.part_path(tmp_path / "t.json", rank).write_text(json.dumps(
            {"rank": rank, "size": 2, "dropped": 0, "events": events}))
    png = tmp_path / "t.png"
    out = subprocess.run([sys.executable, "-m", "pyar", "trace", str(tmp_path / "t.json"),
                          "--plot", str(png)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ranks [0, 1]" in out.stdout and "rank 1: 5 calls" in out.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert trace.check(json.loads((tmp_path / "t.json").read_text())) == []
