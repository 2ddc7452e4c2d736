"""The flight recorder and pyar doctor: what a dump holds (fingerprints, states, callers), the
ring buffer's bound, and the doctor's verdicts on dumps of every kind of fault (the fault
suite, tests/faults/, checks them on real faults)."""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from observed import observed
from pyar.observe import doctor
from pyar.runtime import recorder
import pyar
from pyar.core.errors import TimeoutError

FIELDS = {"count": (4096, 4095), "dtype": ("float32", "int32"), "op": ("sum", "max"),
          "root": (0, 1), "algorithm": ("ring", "recursive_doubling")}


def test_a_run_dumps_every_call_with_its_fingerprint_and_caller():
    folder, proc = observed()
    for rank in (0, 1):
        data = json.loads((folder / "dumps" / f"explicit{rank}.json").read_text())
        assert data["format"] == "pyar-flight/1" and data["rank"] == rank and data["size"] == 2
        assert data["reason"] == "pyar.dump()"
        calls = data["comms"][0]["calls"]
        got = [(c["seq"], c["collective"], c["op"], c["dtype"], c["count"], c["root"],
                c["asked"], c["state"]) for c in calls]
        assert got == [(1, "allreduce", "sum", "float32", 16, 0, "auto", "done"),
                       (2, "allreduce", "sum", "float32", 16, 0, "ring", "done"),
                       (3, "allreduce", "max", "float32", 16, 0, "ring", "done"),
                       (4, "bcast", None, "int64", 4, 1, "auto", "done"),
                       (5, "allreduce", "sum", "float32", 16, 0, "auto", "done")], got
        lines = [c["caller"].rsplit(":", 1) for c in calls]
        assert all(path.endswith("observe_check.py") for path, _ in lines)
        assert [int(n) for _, n in lines] == sorted(int(n) for _, n in lines)
        assert all(c["seconds"] >= 0 for c in calls)
        signalled = json.loads((folder / "dumps" / f"rank{rank}.json").read_text())
        assert signalled["reason"] == "SIGUSR1"
    assert '"last": "' + str(folder / "dumps" / "rank0.json") in proc.stdout


def one_rank(code, **env):
    full = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=full, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_ring_buffer_keeps_the_last_calls_and_zero_turns_it_off(tmp_path):
    code = ("import numpy as np, pyar, json; x = np.ones(3)\n"
            "for _ in range(10): pyar.allreduce(x)\n"          # the fast path records too
            "p = pyar.dump(); print(json.dumps(None if p is None else json.load(open(p))))")
    data = json.loads(one_rank(code, PYAR_TRACE_BUFFER="3", PYAR_DUMP_DIR=str(tmp_path)))
    assert [c["seq"] for c in data["comms"][0]["calls"]] == [8, 9, 10]
    assert json.loads(one_rank(code, PYAR_TRACE_BUFFER="0", PYAR_DUMP_DIR=str(tmp_path))) is None


def test_a_peers_failure_dumps_once_per_call_one_call_a_line(tmp_path):
    """After a mismatch every rank tells every other of its failure: a rank dumps on the
    first telling of a call (not once per peer), and again for another call."""
    code = ("import numpy as np, pyar, json; from pyar.runtime import recorder\n"
            "c = pyar.Comm(); x = np.ones(3)\n"
            "for _ in range(4): pyar.allreduce(x, comm=c)\n"
            "dumped, dump = [], recorder.dump\n"
            "recorder.dump = lambda *a: dumped.append(a[0]) or dump(*a)\n"
            "for rank, seq in ((1, 4), (2, 4), (3, 4), (1, 5), (2, 5)):\n"
            "    recorder._on_notice(c, {'kind': 'failed', 'rank': rank, 'seq': seq,\n"
            "                            'what': f'allreduce #{seq}', 'error': 'E', 'text': ''})\n"
            "print(json.dumps(dumped)); print(open(recorder.last_dump()).read())")
    told, text = one_rank(code, PYAR_DUMP_DIR=str(tmp_path)).split("\n", 1)
    assert json.loads(told) == ["rank 1 failed", "rank 1 failed"]
    calls = json.loads(text)["comms"][-1]["calls"]
    assert [c["seq"] for c in calls] == [1, 2, 3, 4]
    assert [line.strip()[:10] for line in text.splitlines() if '"collective"' in line and
            '"state": "done"' in line] == ['{"seq": 1,', '{"seq": 2,', '{"seq": 3,', '{"seq": 4,']


def test_a_bad_buffer_size_says_what_it_takes(monkeypatch):
    from pyar.runtime import settings

    monkeypatch.setenv("PYAR_TRACE_BUFFER", "lots")
    with pytest.raises(ValueError, match="PYAR_TRACE_BUFFER must be an integer >= 0"):
        settings.read()
    monkeypatch.setenv("PYAR_TRACE_BUFFER", "7")
    monkeypatch.setenv("PYAR_DEBUG_SUBSYS", "^P2P")
    read = settings.read()
    assert read.trace_buffer == 7 and "P2P" not in read.debug_subsys


def test_a_timeouts_state_is_its_data_not_its_words():
    error = TimeoutError("allreduce #7 on rank 1 (ring, 4 float32): gave up", step=2, steps=6,
                         peers=(0, 3), waited=1.5)
    state = recorder.state_of(error)
    assert state == {"error": "TimeoutError", "message": str(error), "step": 2, "steps": 6,
                     "peers": [0, 3], "waited": 1.5}
    restated = error.restated("in other words")
    assert type(restated) is TimeoutError and str(restated) == "in other words"
    assert recorder.state_of(restated) == {**state, "message": "in other words"}


def test_a_call_stopped_by_a_peer_keeps_where_it_waited():
    stopped = pyar.MismatchError("allreduce #7 on rank 0 stopped: rank 3 failed ...")
    stopped.failed_rank = 3
    stopped.waiting = TimeoutError("rank 0 step 1 waited for rank 3", step=1, peers=(3,),
                                   waited=0.2)
    assert recorder.state_of(stopped) == {
        "error": "MismatchError", "message": str(stopped), "stopped_by": 3, "step": 1,
        "peers": [3], "waited": 0.2}


@given(st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True))
def test_ranks_text_runs(ranks):
    text = doctor.ranks_text(ranks)
    back = []
    for part in text.split(" ", 1)[1].split(", "):
        lo, _, hi = part.partition("-")
        back += range(int(lo), int(hi or lo) + 1)
    assert back == sorted(ranks)


def dumps(size, culprit, field, missing=()):
    """Synthetic dumps: 3 good calls, then call #4 where ``culprit`` differs in ``field``
    (or calls bcast for "collective"), and waits that gave up."""
    out = {}
    for rank in range(size):
        if rank in missing:
            continue
        calls = []
        for seq in range(1, 5):
            call = {"seq": seq, "collective": "allreduce", "op": "sum", "dtype": "float32",
                    "count": 4096, "shape": [4096], "root": 0, "algorithm": "ring",
                    "caller": f"/x/train.py:{80 + seq}", "began": 100.0 + seq,
                    "seconds": 0.001, "state": "done"}
            if seq == 4:
                call.update(state="failed", error="TimeoutError", message="...", step=1,
                            peers=[(rank + 1) % size], seconds=1.0, waited=1.0)
                if rank == culprit:
                    if field == "collective":
                        call.update(collective="bcast", caller="/x/train.py:95")
                    else:
                        call[field] = FIELDS[field][1]
            calls.append(call)
        out[rank] = {"format": "pyar-flight/1", "rank": rank, "size": size,
                     "reason": "TimeoutError", "error": "...",
                     "comms": [{"index": 0, "rank": rank, "size": size, "seq": 4,
                                "calls": calls}]}
    return out


@given(st.integers(3, 9), st.data(), st.sampled_from([*FIELDS, "collective"]))
def test_the_doctor_names_the_odd_rank_and_what_differs(size, data, field):
    culprit = data.draw(st.integers(0, size - 1))
    lines = doctor.diagnose(dumps(size, culprit, field))
    others = doctor.ranks_text(set(range(size)) - {culprit})
    if field == "collective":
        assert lines[0] == (f"control flow diverged at call #4: allreduce on {others} at "
                            f"train.py:84, bcast on rank {culprit} at train.py:95; the odd "
                            f"one out: rank {culprit}")
    else:
        good, bad = FIELDS[field]
        assert lines[0] == (f"ranks disagree on allreduce #4: {field} {good} on {others}, "
                            f"{field} {bad} on rank {culprit}; the odd one out: rank {culprit}")
    kind = "bcast" if field == "collective" else "allreduce"
    assert f"{kind} #4 step 1 on rank {culprit} waited 1.0 s for rank " \
           f"{(culprit + 1) % size}" in lines


@given(st.integers(3, 9), st.data())
def test_the_doctor_names_a_missing_rank_and_the_waits_leading_to_it(size, data):
    gone = data.draw(st.integers(0, size - 1))
    lines = doctor.diagnose(dumps(size, None, "count", missing=[gone]))
    assert lines[0].startswith(f"rank {gone} is missing: no dump")
    assert f"the waits lead to rank {gone} (no dump: killed or exited early?)" in lines


def test_the_doctor_command(tmp_path):
    for rank, data in dumps(4, 3, "count").items():
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "-m", "pyar", "doctor", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ranks disagree on allreduce #4: count 4096 on ranks 0-2, "
                                 "count 4095 on rank 3")
    out = subprocess.run([sys.executable, "-m", "pyar", "doctor", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "not a directory" in out.stderr
