"""Bounded waits (``timeout=``, ``PYAR_TIMEOUT``): a rank that never joins, or joins late,
makes every other rank raise pyar.TimeoutError within the timeout + 2 s, naming the call,
the step and the peer, on every path (tests/helpers/timeouts_check.py under mpiexec)."""

import json

import pytest

from launch import explain, run

SCENARIOS = ("mailbox", "large", "first call", "staged device", "sleeper")


@pytest.mark.parametrize("nprocs,env", [
    (2, {}),                                        # timeout=: every wait polls
    (3, {"PYAR_TIMEOUT": "1"}),                     # repeated small calls: the lean path
    (3, {"PYAR_TIMEOUT": "1", "PYAR_SHM_BYTES": "0"})])     # ... on persistent requests
def test_every_waiting_rank_times_out_naming_call_step_and_peer(nprocs, env):
    proc = run(nprocs, "tests/helpers/timeouts_check.py", timeout=120, env=env)
    assert proc.returncode == 0, explain(proc)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert {r["scenario"] for r in rows} == set(SCENARIOS), explain(proc)
    last = nprocs - 1
    for row in rows:
        where = f"{row}"
        if row["rank"] == last:         # skipped the call, or came late: its peers may have
            assert row["error"] in (None, "TimeoutError"), where   # sent it all it needed
            continue
        assert row["error"] == "TimeoutError", where
        assert row["seconds"] <= 1.0 + 2.0, where
        message = row["message"]
        assert "allreduce #" in message and f"on rank {row['rank']}" in message, where
        if row["scenario"] == "first call":
            assert "agree on the call" in message, where
        elif row["rank"] != last:
            assert "waited for rank" in message and "step" in message, where
