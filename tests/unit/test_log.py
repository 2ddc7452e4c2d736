"""Logs: PYAR_DEBUG's levels, PYAR_DEBUG_SUBSYS's NCCL syntax, PYAR_DEBUG_FILE's patterns; what a
2-rank run logs (INIT once per communicator, a COLL line per call with the algorithm and why,
P2P per step); and nothing on the hook when logging is off."""

import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from observed import observed
from pyar.observe import log
from pyar.model import tuner


def test_levels():
    assert log.level("") is None
    assert [log.level(t) for t in ("WARN", "info", " TRACE ")] == [30, 20, log.TRACE]
    with pytest.raises(ValueError, match="PYAR_DEBUG must be WARN, INFO or TRACE, got 'LOUD'"):
        log.level("loud")


@given(st.sets(st.sampled_from(log.SUBSYSTEMS), min_size=1))
def test_subsystems_include_and_exclude_as_nccl_does(names):
    text = ",".join(sorted(names))
    assert log.subsystems(text) == names
    assert log.subsystems("^" + text) == set(log.SUBSYSTEMS) - names
    assert log.subsystems(text.lower()) == names


def test_subsystems_all_and_bad():
    assert log.subsystems("") == log.subsystems("ALL") == set(log.SUBSYSTEMS)
    assert log.subsystems("^ALL") == set()
    with pytest.raises(ValueError, match="unknown subsystem NET"):
        log.subsystems("COLL,NET")


def test_file_name_patterns():
    name = log.file_name("/x/pyar.%h.%p.%r.log", 3)
    assert name == f"/x/pyar.{socket.gethostname()}.{os.getpid()}.3.log"


def test_reason_names_the_explicit_argument_pyar_algo_and_autos_predictions(monkeypatch):
    assert tuner.reason("allreduce", "ring", 4, 1024) == "explicit argument"
    auto = tuner.reason("allreduce", "auto", 4, 1024, "float32")
    assert auto.startswith("auto: ") and " us" in auto
    chosen = tuner.select("allreduce", "auto", 4, 1024, 4096, "float32")
    assert auto.split(": ")[1].startswith(chosen + " ")        # the winner first
    monkeypatch.setenv("PYAR_ALGO", "allreduce:ring")
    assert tuner.reason("allreduce", "auto", 4, 1024) == "PYAR_ALGO=allreduce:ring"


def test_a_run_logs_set_up_calls_and_steps():
    folder, _ = observed()
    for rank in (0, 1):
        lines = (folder / f"log.{rank}.txt").read_text().splitlines()
        assert all(f":{rank} [pyar " in line for line in lines), lines
        init = [line for line in lines if "[pyar INIT]" in line]
        assert len(init) == 1 and "rank %d of 2" % rank in init[0], init
        assert "CUDA-aware MPI:" in init[0] and "tuning:" in init[0] and "mailboxes" in init[0]
        coll = [line.split("] ", 1)[1] for line in lines if "[pyar COLL]" in line]
        assert len(coll) == 5, coll
        assert coll[0].startswith("allreduce #1: count 16 float32 op sum: ") and \
            "(auto: " in coll[0]
        assert coll[1].startswith("allreduce #2: count 16 float32 op sum: ring (explicit "
                                  "argument); done in ")
        assert coll[2].startswith("allreduce #3: count 16 float32 op max: ring")
        assert coll[3].startswith("bcast #4: count 4 int64 root 1: ")
        assert all(" us" in line for line in coll)
        p2p = [line for line in lines if "[pyar P2P]" in line]
        ring = [line for line in p2p if "allreduce #2 " in line]
        assert len(ring) == 2 and all(f"peers [{1 - rank}], sent 32 B, received 32 B" in line
                                      for line in ring), ring


def test_off_nothing_listens_on_the_hook():
    """No PYAR_DEBUG, no PYAR_TRACE: making a Comm leaves the event hook unset, so the fast
    paths stay as they were (one rank, in a fresh process)."""
    code = ("import numpy as np, pyar; from pyar.runtime import progress; "
            "pyar.allreduce(np.ones(2)); print(progress.hook is None)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYAR_DEBUG", "PYAR_TRACE"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stdout.strip() == "True", out.stderr
