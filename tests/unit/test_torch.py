"""pyar.torch on one rank: tensors in and out of the collectives without copies, bfloat16,
nonblocking results, GradientBuckets over tensors, pyar.torch on import pyar; and the DDP
example on the pyar backend at 4 ranks; torchrun's workers, each an MPI job of one, joined
into one world. Skipped without torch (the extra)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pyar  # noqa: E402
import pyar.integrations.torch as pt
from launch import ROOT, explain, run  # noqa: E402

from pyar.runtime import launch  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int32])
def test_as_array_shares_the_tensors_memory(dtype):
    t = torch.arange(12).to(dtype).reshape(3, 4)
    a = pt.as_array(t)
    assert a.ctypes.data == t.data_ptr() and a.shape == (3, 4)
    a[0, 0] = 5
    assert float(t[0, 0]) == 5
    back = pt.as_tensor(a)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()


def test_collectives_take_and_return_tensors():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    y = pyar.allreduce(x, op="avg")
    assert isinstance(y, torch.Tensor) and y.data_ptr() != x.data_ptr() and torch.equal(y, x)
    assert pyar.allreduce(x, x) is x                         # in place: x itself
    out = torch.empty(2, 3)
    assert pyar.allreduce(x, out) is out and torch.equal(out, x)
    b = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    assert torch.equal(pyar.allreduce(b), b) and pyar.allreduce(b).dtype == torch.bfloat16
    r = pyar.iallreduce(x)
    assert torch.equal(r.wait(), x) and isinstance(r.result, torch.Tensor)
    assert pyar.allgather(x).shape == (1, 2, 3)
    w = torch.ones(3, requires_grad=True)                    # a parameter: read detached
    assert torch.equal(pyar.allreduce(w), torch.ones(3))
    strided = torch.arange(10.0)[::2]                        # non-contiguous: copied, not misread
    assert torch.equal(pyar.allreduce(strided), strided)


def test_mismatched_out_is_refused():
    with pytest.raises(ValueError, match="shape"):
        pyar.allreduce(torch.ones(3), torch.ones(4))
    with pytest.raises(TypeError, match="CPU and CUDA"):
        pt.as_array(torch.ones(2, device="meta"))


def test_gradient_buckets_over_tensors():
    from mpi4py import MPI

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model(torch.randn(5, 4)).sum().backward()
    grads = [p.grad for p in model.parameters()]
    before = [g.clone() for g in grads]
    b = pyar.GradientBuckets(grads, comm=MPI.COMM_SELF, compression="fp16")
    for i in range(len(grads)):
        b.ready(i)
    b.wait()
    for g, e in zip(grads, before):      # written in place, through the shared memory
        assert torch.allclose(g, e, rtol=2e-3, atol=1e-4)


def test_gradient_buckets_views_are_tensors_in_the_buckets():
    from mpi4py import MPI

    grads = [torch.ones(3), torch.full((2, 2), 2.0)]
    b = pyar.GradientBuckets(grads, comm=MPI.COMM_SELF, views=True)
    assert all(isinstance(g, torch.Tensor) for g in b.grads)
    assert b.grads[1].data_ptr() == b.flat[0].ctypes.data           # reversed: gradient 1 first
    assert torch.equal(b.grads[0], torch.ones(3)) and b.grads[0].data_ptr() != grads[0].data_ptr()


def test_pyar_torch_is_an_attribute_after_import_pyar_and_registers_the_backend():
    import subprocess
    import sys

    code = ("import pyar, torch.distributed as dist; "
            "assert 'pyar' not in dist.Backend.backend_list; "
            "t = pyar.torch; "
            "assert 'pyar' in dist.Backend.backend_list and t.BACKEND == 'pyar'; "
            "from torch.distributed.rendezvous import _rendezvous_handlers; "
            "assert 'pyar' in _rendezvous_handlers; "
            "import pyar.torch; pyar.torch.register(); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_without_torch_pyar_torch_names_the_extra():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; import pyar\n"
            "for get in (lambda: pyar.torch, lambda: __import__('pyar.torch')):\n"
            "    try:\n"
            "        get()\n"
            "    except ImportError as e:\n"
            "        assert \"pip install 'pyar[torch]'\" in str(e), e\n"
            "    else:\n"
            "        raise SystemExit('no ImportError')\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_ddp_example_at_4_ranks_trains_as_gloo_does():
    """examples/ddp_torch.py at 4 ranks (make examples runs it at 2): 50 steps of DDP on
    backend="pyar" and on gloo, plain and with the fp16 hook; the example checks that the
    losses agree on every rank and step and that the parameters end bitwise identical on
    every rank (about a minute on 2 cores). Should it hang, the timeout's SIGTERM prints
    every rank's Python stacks into the report."""
    proc = run(4, "tests/helpers/stacks_on_term.py", "examples/ddp_torch.py", timeout=400)
    assert proc.returncode == 0, explain(proc)
    assert "check: losses on pyar equal gloo's" in proc.stdout, explain(proc)


@pytest.mark.mpiexec
def test_torchrun_workers_each_an_mpi_job_join_one_world_and_singletons_are_refused():
    """Under torchrun, every worker started as ``mpiexec -n 1`` (MPICH): the backend joins
    them into one world through torch's store, on which collectives, a subgroup, send/recv
    and DDP run (tests/helpers/torchrun_check.py). Workers that are MPI singletons (plain
    ``torchrun script``) are refused with the fix named, on every rank, without a hang."""
    mpiexec = launch.find_mpiexec()
    if launch.launcher_family(mpiexec) != "mpich":
        pytest.skip("joining MPI jobs of one through a port is checked on MPICH")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    check = "tests/helpers/torchrun_check.py"
    joined = subprocess.run(
        ["timeout", "-k", "10", "200", torchrun, "--standalone", "--nproc-per-node", "3",
         "--no-python", mpiexec, "-n", "1", sys.executable, check],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=230)
    assert joined.returncode == 0, joined.stdout + joined.stderr[-4000:]
    for r in range(3):
        assert f"torchrun check: rank {r} of 3 ok" in joined.stdout, joined.stdout
    alone = subprocess.run(
        ["timeout", "-k", "10", "200", torchrun, "--standalone", "--nproc-per-node", "2",
         check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=230)
    assert alone.returncode != 0 and "MPI singleton" in alone.stderr and \
        "mpiexec -n 1" in alone.stderr, alone.stderr[-4000:]


EXIT_DURING_CALLBACK = """
import threading, time
import torch, torch.distributed as dist, pyar.torch
dist.init_process_group("pyar")
began = threading.Event()
def slow(future):
    began.set()
    time.sleep(0.3)
    print("callback finished", flush=True)
dist.all_reduce(torch.ones(4), async_op=True).get_future().then(slow)
assert began.wait(60)
"""


def test_exit_while_a_works_callback_runs_waits_for_it_and_exits_cleanly():
    """The main thread ends while the backend's helper thread is inside a work's future
    callback: the process waits for the callback and exits 0 (a daemon thread finalized
    under it would abort the process inside torch's C++, "terminate called without an
    active exception")."""
    proc = run(2, "-c", EXIT_DURING_CALLBACK, timeout=120)
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.count("callback finished") == 2, explain(proc)
