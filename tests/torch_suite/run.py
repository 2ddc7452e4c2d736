"""torch's own distributed suite (``DistributedTest._DistTestBase``) on the ``pyar`` backend and
on gloo, under mpiexec, with a table of passed / failed / skipped per backend and rank
count (``make test-torch``)::

    python tests/torch_suite/run.py [--backends pyar,pyar-as-gloo,gloo] [--ranks 2,3]
                                    [-k PATTERN]
                                    [--timeout 240] [--json OUT] [--batch 100]

``pyar`` is the backend as torch's suite knows an out-of-tree backend (its name in the
suite's plugin, ddp and subgroup features): a test that names the backends it runs on
(``require_backend_is_available({"gloo"})``, ``BACKEND != "gloo"``) skips.
``pyar-as-gloo`` runs pyar in gloo's selection: the suite is imported as for gloo (every
test gloo runs, and gloo's paths in the test bodies), and the groups it makes with
``backend="gloo"`` are pyar's; a test that checks the backend's name, or gloo's own
features (monitored barrier, sparse tensors), fails there by construction.

Each backend and rank count runs in mpiexec jobs of at most ``--batch`` tests each
(:mod:`tests.torch_suite.ranks`: every rank runs the same tests in the same order); a job
that ends early (a test past ``--timeout`` seconds, a crash, ranks whose outcomes differ)
is followed by a new one at the next test, the test that was running counted as failed
with the job's last output lines. ``-k`` keeps the tests whose name matches a regular
expression (``re.search``). Runs one job at a time. Prints, per test that fails on one
backend, the reason (the last lines of the first failing rank's traceback); a test that
fails on gloo is the harness's, not pyar's (the table's ``gloo`` rows are the control).
``--json`` writes every test's outcome per backend and rank count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANKS = Path(__file__).with_name("ranks.py")
LAUNCH = ROOT / "pyar" / "runtime" / "launch.py"

LIST = """
import os, unittest
os.environ.update(BACKEND="gloo", WORLD_SIZE="2", TEMP_DIR="/nonexistent")
from torch.testing._internal.distributed.distributed_test import DistributedTest
print("\\n".join(unittest.TestLoader().getTestCaseNames(DistributedTest._DistTestBase)))
"""


def test_names(python: str) -> list[str]:
    """The test methods of torch's ``_DistTestBase``, in unittest's (sorted) order."""
    out = subprocess.run([python, "-c", LIST], capture_output=True, text=True, check=True,
                         timeout=300)
    return out.stdout.split()


def outcome(ranks: list) -> tuple[str, str]:
    """A test's (outcome, detail) from every rank's: ``fail`` if any rank failed (the first
    such rank's detail, named), else ``skip`` if any skipped, else ``pass``."""
    for r, (what, detail) in enumerate(ranks):
        if what == "fail":
            return "fail", f"rank {r}: {detail}"
    for what, detail in ranks:
        if what == "skip":
            return "skip", detail
    return "pass", ""


def run_config(python: str, backend: str, nprocs: int, tests: list[str], timeout: float,
               batch: int, log) -> dict:
    """{test: (outcome, detail, seconds)} of ``tests`` on ``backend`` at ``nprocs`` ranks."""
    results: dict = {}
    todo = list(tests)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "TORCH_SUITE_TIMEOUT": str(timeout), "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
        "GLOO_SOCKET_IFNAME":
        os.environ.get("GLOO_SOCKET_IFNAME", "lo"), "OMP_NUM_THREADS": "1"}
    while todo:
        chunk = todo[:batch]
        with tempfile.TemporaryDirectory(prefix=f"torch-suite-{backend}-") as tmp:
            lines = Path(tmp) / "results.jsonl"
            command = [python, str(LAUNCH), "-n", str(nprocs), python, "-m", "mpi4py",
                       str(RANKS), backend, tmp, str(lines), *chunk]
            # the job's bound: every test's deadline, and the start of the ranks
            bound = timeout * len(chunk) + 120
            try:
                job = subprocess.run(command, env=env, capture_output=True, text=True,
                                     timeout=bound, cwd=tmp)     # (pyar's flight records)
                output, rc = job.stdout + job.stderr, job.returncode
            except subprocess.TimeoutExpired as e:
                output = (e.stdout or b"").decode(errors="replace") + \
                    (e.stderr or b"").decode(errors="replace")
                rc = "timeout"
            log.write(output)
            running = None
            for line in lines.read_text().splitlines() if lines.exists() else []:
                entry = json.loads(line)
                if "start" in entry:
                    running = entry["start"]
                    continue
                results[entry["test"]] = (*outcome(entry["ranks"]), entry["seconds"])
                running = None
                _say(backend, nprocs, entry["test"], results[entry["test"]], log)
        done = [t for t in chunk if t in results]
        if running is None and len(done) < len(chunk):
            running = chunk[len(done)]      # (the job died before any line of its own)
        if running is not None:
            results[running] = ("fail", ended(output, rc, timeout), None)
            _say(backend, nprocs, running, results[running], log)
        todo = [t for t in todo if t not in results]
    return results


def ended(output: str, rc, timeout: float) -> str:
    """Why a job ended in a test: past its deadline (each rank's threads' innermost
    frames, from faulthandler's dump), else its exit status and last lines."""
    lines = output.strip().splitlines()
    if any(line.startswith("Timeout (") for line in lines):
        inner = [lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                 if line.endswith("(most recent call first):")]
        return f"timed out after {timeout:g} s; innermost frames: " + "; ".join(inner)
    return f"the job ended in it (exit {rc}):\n" + "\n".join(lines[-12:])


def _say(backend, nprocs, test, result, log) -> None:
    """A test's line as it finishes (a failure's with the last line of its reason; the
    whole reason to ``log``)."""
    what, detail, _ = result
    log.write(f"== {backend} x{nprocs} {test}: {what}\n{detail}\n")
    last = detail.strip().splitlines()[-1] if what == "fail" and detail.strip() else ""
    print(f"  {backend} x{nprocs} {test}: {what}" + (f": {last}" if last else ""), flush=True)


def table(all_results: dict) -> str:
    """The markdown table: passed / failed / skipped per backend and rank count."""
    rows = ["| backend | ranks | passed | failed | skipped | seconds |",
            "|---|---:|---:|---:|---:|---:|"]
    for (backend, n), results in all_results.items():
        count = {k: sum(1 for r in results.values() if r[0] == k)
                 for k in ("pass", "fail", "skip")}
        seconds = sum(r[2] or 0 for r in results.values())
        rows.append(f"| {backend} | {n} | {count['pass']} | {count['fail']} | "
                    f"{count['skip']} | {seconds:.0f} |")
    return "\n".join(rows)


def differences(all_results: dict) -> list[str]:
    """Every (test, rank count) whose outcome is not the same on every backend, with each
    failure's and skip's reason."""
    lines = []
    counts = sorted({n for _, n in all_results})
    backends = sorted({b for b, _ in all_results})
    for n in counts:
        tests = sorted(set().union(*(r for (b, m), r in all_results.items() if m == n)))
        for t in tests:
            got = {b: all_results.get((b, n), {}).get(t) for b in backends}
            kinds = {b: g[0] for b, g in got.items() if g}
            if len(set(kinds.values())) > 1 or "fail" in kinds.values():
                lines.append(f"- {t} x{n}: " + ", ".join(f"{b} {k}" for b, k in kinds.items()))
                for b, g in got.items():
                    if g and g[0] in ("fail", "skip"):
                        reason = "\n      ".join(g[1].splitlines())
                        lines.append(f"    {b}: {reason}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="pyar,pyar-as-gloo,gloo")
    p.add_argument("--ranks", default="2,3")
    p.add_argument("-k", dest="pattern", default=None,
                   help="run the tests whose name matches this regular expression")
    p.add_argument("--timeout", type=float, default=240, help="seconds a test may take")
    p.add_argument("--batch", type=int, default=100, help="tests per mpiexec job")
    p.add_argument("--json", default=None, help="write every outcome here")
    p.add_argument("--log", default="torch-suite.log", help="the ranks' output")
    p.add_argument("--python", default=sys.executable)
    a = p.parse_args(argv)
    tests = test_names(a.python)
    if a.pattern:
        tests = [t for t in tests if re.search(a.pattern, t)]
    if not tests:
        p.error(f"no test of torch's suite matches -k {a.pattern!r}")
    backends = a.backends.split(",")
    counts = [int(n) for n in a.ranks.split(",")]
    print(f"torch's DistributedTest: {len(tests)} tests x {backends} x {counts} ranks",
          flush=True)
    all_results = {}
    with open(a.log, "w") as log:
        for n in counts:
            for b in backends:
                start = time.monotonic()
                all_results[(b, n)] = run_config(a.python, b, n, tests, a.timeout, a.batch,
                                                 log)
                print(f"{b} x{n}: {time.monotonic() - start:.0f} s", flush=True)
    print(table(all_results))
    print("\n".join(differences(all_results)))
    if a.json:
        Path(a.json).write_text(json.dumps(
            {f"{b} x{n}": r for (b, n), r in all_results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
