"""The Numba kernel cache under MPI: four ranks starting at once on an empty cache compile each
kernel signature once between them, all get right results, and a second job loads everything."""

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
