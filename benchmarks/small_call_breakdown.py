# Where a small call's time goes, 2 ranks of one node, float32 sum, out of place:
# PYTHONPATH=<checkout> python pyar/runtime/launch.py -n 2 python benchmarks/small_call_breakdown.py
# Per size (8 B, 128 B, 2 KiB), min over 7 rounds of 20,000 calls, us a call:
#   mpi       the faster of comm.Allreduce and a persistent Allreduce_init's Start + Wait
#   init      pyar.allreduce_init's start() + wait()
#   plain     pyar.allreduce(x, out)
#   native    the request's native program run back to back in one native loop: the exchange
#   dispatch  one call of the program's runner from Python on an empty program
#   python    init (or plain) - native - dispatch: what Python does around the native call
import sys, time
import numpy as np
from mpi4py import MPI
from numba import njit
import pyar
from pyar.kernels import mailbox

comm = MPI.COMM_WORLD
N, ROUNDS = 20000, 7


@njit
def back_to_back(program, rows, call, fingerprint, seq, spins, n):
    for i in range(n):
        at = mailbox.run(program, rows, 0, call + i, fingerprint, seq + i, spins)
        if at != rows:
            return i
    return n


back_to_back(0, 0, 0, 1, 0, 1, 0)        # compiled now, before any rank waits for another


def timed(loop):
    comm.Barrier()
    t = time.perf_counter()
    loop()
    return comm.allreduce((time.perf_counter() - t) / N, MPI.MAX) * 1e6


lines = []
for nbytes in (8, 128, 2048):
    x = np.ones(nbytes // 4, np.float32)
    out = np.empty_like(x)
    request = pyar.allreduce_init(x, out)
    mpi_request = comm.Allreduce_init(x, out)
    program = request.engine.program
    if program is None:
        sys.exit(f"{nbytes} B: the request runs no native program here (not one node?)")
    empty = np.zeros((1, mailbox.WIDTH), np.int64)
    native_run = mailbox.runner()

    def init():
        start, wait = request.start, request.wait
        for _ in range(N):
            start()
            wait()

    def plain():
        for _ in range(N):
            pyar.allreduce(x, out)

    def mpi_blocking():
        for _ in range(N):
            comm.Allreduce(x, out)

    def mpi_persistent():
        for _ in range(N):
            mpi_request.Start()
            mpi_request.Wait()

    def native():
        channels = program.channels
        done = back_to_back(program.address, program.rows, channels.calls, program.fingerprint,
                            1, 1 << 26, N)
        channels.calls += done
        assert done == N

    def dispatch():
        address = empty.ctypes.data
        for _ in range(N):
            native_run(address, 0, 0, 0, 1, 0, 1)

    for f in (init, plain, mpi_blocking, mpi_persistent, native, dispatch):     # warm up
        comm.Barrier()
        f()
    best = {}
    for _ in range(ROUNDS):
        for name, f in (("init", init), ("plain", plain), ("mpi", mpi_blocking),
                        ("mpi_init", mpi_persistent), ("native", native),
                        ("dispatch", dispatch)):
            best[name] = min(best.get(name, 1e9), timed(f))
    mpi = min(best["mpi"], best["mpi_init"])
    exchange = best["native"] + best["dispatch"]
    lines.append(f"{nbytes:>6} B  mpi {mpi:5.2f}  init {best['init']:5.2f} "
                 f"({best['init'] / mpi:4.2f}x)  plain {best['plain']:5.2f} "
                 f"({best['plain'] / mpi:4.2f}x)  native {best['native']:5.2f}  dispatch "
                 f"{best['dispatch']:5.2f}  python: init {best['init'] - exchange:5.2f}, "
                 f"plain {best['plain'] - exchange:5.2f}")
    request.free()
    mpi_request.Free()
if comm.rank == 0:
    print(f"# {MPI.Get_library_version().splitlines()[0].strip()}; us a call, min of "
          f"{ROUNDS} rounds of {N}")
    print("\n".join(lines), flush=True)
