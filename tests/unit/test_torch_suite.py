"""tests/torch_suite/run.py's verdicts and table (make test-torch), on outcomes made up here:
a test fails if any rank failed, skips if any skipped, and the differences name every test
whose outcome is not the same on every backend, with each failure's reason."""

import importlib.util
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "torch_suite" / "run.py"
spec = importlib.util.spec_from_file_location("torch_suite_run", PATH)
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def test_a_test_fails_if_any_rank_failed_and_skips_if_any_skipped():
    assert run.outcome([["pass", ""], ["pass", ""]]) == ("pass", "")
    assert run.outcome([["pass", ""], ["fail", "boom"], ["skip", "why"]]) == \
        ("fail", "rank 1: boom")
    assert run.outcome([["skip", "no GPU"], ["pass", ""]]) == ("skip", "no GPU")


def test_the_table_counts_and_the_differences_name_each_failure():
    results = {("pyar", 2): {"a": ("pass", "", 1.0), "b": ("fail", "rank 0: Err", 2.0),
                             "c": ("skip", "x", 0.0)},
               ("gloo", 2): {"a": ("pass", "", 1.5), "b": ("pass", "", 1.0),
                             "c": ("skip", "x", 0.0)}}
    table = run.table(results).splitlines()
    assert table[2] == "| pyar | 2 | 1 | 1 | 1 | 3 |"
    assert table[3] == "| gloo | 2 | 2 | 0 | 1 | 2 |"
    lines = run.differences(results)
    assert lines[0] == "- b x2: gloo pass, pyar fail" and "rank 0: Err" in lines[1]
    assert not any(line.startswith(("- a", "- c")) for line in lines)


def test_a_job_past_its_deadline_names_where_each_thread_was():
    dump = ("noise\nTimeout (0:00:03)!\nCurrent thread 0x1 (most recent call first):\n"
            '  File "x.py", line 9 in wait\n  File "x.py", line 1 in <module>\n'
            "Thread 0x2 (most recent call first):\n  File \"p.py\", line 5 in _loop\n")
    why = run.ended(dump, 1, 3)
    assert why.startswith("timed out after 3 s") and "line 9 in wait" in why and \
        "line 5 in _loop" in why and "<module>" not in why
    assert run.ended("a\nb\nboom", 137, 3) == "the job ended in it (exit 137):\na\nb\nboom"
