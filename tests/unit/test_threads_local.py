"""The thread rules in one process (tests/mpi/test_threads.py has them across
ranks): a hook holds thread A inside a call, and what the main thread may do meanwhile."""

import subprocess
import sys
import textwrap

HELD = textwrap.dedent("""
    import threading, numpy as np, pyar
    from pyar.runtime import progress
    from mpi4py import MPI
    inside, go_on = threading.Event(), threading.Event()

    def hold(event, run, step):           # thread A's call stops before it returns
        if event == "done" and threading.current_thread().name == "A":
            inside.set()
            go_on.wait(30)

    one, other = MPI.COMM_SELF.Dup(), MPI.COMM_SELF.Dup()
    x = np.arange(4.0)
    pyar.allreduce(x, comm=one), pyar.allreduce(x, comm=other)    # their Comms made
    got = {}
    a = threading.Thread(name="A", target=lambda: got.setdefault(
        "a", pyar.allreduce(x, comm=one, algorithm="ring")))
    progress.listen(hold)
    a.start()
    assert inside.wait(30)
    for name, comm in (("same", one), ("other", other)):
        try:
            pyar.reduce_scatter(x, comm=comm, timeout=5)
            print(name, "ran")
        except pyar.PyarError as e:
            print(name, "refused:", e)
    go_on.set()
    a.join(30)
    progress.unlisten(hold)
    print("A got", got["a"].tolist(), "after:", pyar.allreduce(x, comm=one).tolist())
""")


def held(thread_level: str) -> str:
    code = f"import mpi4py; mpi4py.rc.thread_level = {thread_level!r}\n" + HELD
    if thread_level == "multiple":      # the other communicator's call needs the progress
        code = code.replace('("other", other)', "")     # lock the hook holds: left out here
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_call_on_a_communicator_in_use_by_another_thread_is_refused_and_does_nothing():
    out = held("multiple")
    assert "same refused: pyar.reduce_scatter: another thread is in a pyar call on this " \
           "communicator" in out, out
    assert "give each thread a communicator of its own (comm.Dup())" in out
    assert "A got [0.0, 1.0, 2.0, 3.0] after: [0.0, 1.0, 2.0, 3.0]" in out, out


def test_without_thread_multiple_no_two_calls_may_overlap_on_any_communicator():
    out = held("serialized")
    for name in ("same", "other"):
        assert f"{name} refused: pyar.reduce_scatter: another thread is in a pyar call, and " \
               f"this MPI was initialized with MPI_THREAD_SERIALIZED" in out, out
    assert "A got [0.0, 1.0, 2.0, 3.0] after: [0.0, 1.0, 2.0, 3.0]" in out, out
