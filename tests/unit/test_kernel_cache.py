"""The Numba kernel cache under MPI: four ranks starting at once on an empty cache compile each
kernel signature once between them, all get right results, and a second job loads everything.
Threads of one process making their first kernel calls together all get them."""

import subprocess
import sys

from launch import explain, run

SIGNATURES = 4       # kernel_cache_check.py: fold_int on int32, fold_float on float32, fold_bf16,
                     # the mailbox runner


def test_four_ranks_on_a_cold_cache(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    cold = run(4, "tests/helpers/kernel_cache_check.py", timeout=240, env=env)
    assert cold.returncode == 0 and "every result right" in cold.stdout, explain(cold)
    assert f"compiled {SIGNATURES} loaded {3 * SIGNATURES}" in cold.stdout, explain(cold)
    warm = run(4, "tests/helpers/kernel_cache_check.py", timeout=240, env=env)
    assert warm.returncode == 0 and "every result right" in warm.stdout, explain(warm)
    assert f"compiled 0 loaded {4 * SIGNATURES}" in warm.stdout, explain(warm)


FIRST_CALLS_IN_THREADS = """
import threading, numpy as np
from pyar import kernels
from pyar.kernels import mailbox
errors = []
def first_calls(dtype):
    try:
        a = np.ones(8, dtype)
        kernels.reduce_into(a, a.copy(), "sum")
        mailbox.runner()
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=first_calls, args=(t,)) for t in ("f4", "f8", "i8")]
[t.start() for t in threads]; [t.join() for t in threads]
print(errors or "ok")
"""


def test_threads_making_their_first_kernel_calls_at_once_all_get_them():
    """Loading kernels refreshes Numba's typing and target contexts, which is not thread-safe:
    unserialised, a third of such processes raised "generator already executing"."""
    processes = [subprocess.Popen([sys.executable, "-c", FIRST_CALLS_IN_THREADS], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(8)]
    outs = [p.communicate(timeout=240) for p in processes]
    assert all(out.strip() == "ok" for out, _ in outs), outs
