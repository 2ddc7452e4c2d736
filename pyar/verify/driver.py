"""The launching side of ``pyar verify``: MPI jobs under a watchdog, the sweep, shrinking, the report.

No MPI here: each rank count in turn gets a job (``mpiexec -n N python -m mpi4py -m
pyar.verify.worker``) that runs one case per request, and is ended before the next rank
count's starts. A case that does not answer within ``case_timeout`` seconds is a hang: the
job is killed, and the hang, with its case, is that target's verdict at that rank count (no
further case of it runs there). The whole run ends at ``time_limit`` and reports what it
did not reach. A failure is shrunk by hypothesis over cases no more complex than
it (fewer ranks, a smaller count, simpler dtype, op, layout, mode, values; each candidate
in a fresh job when the failure may depend on history, i.e. takes several calls), and
the smallest failing case is printed as a reproducer script.
"""

from __future__ import annotations

import json
import math
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..algorithms import LIBRARY, algorithms
from ..runtime.launch import find_mpiexec, launch_settings
from . import cases as C, judge, standalone, targets as T

RANKS = "1-4"           # the defaults: on 2 cores about 15 s for a target in Python or MPI,
PROFILE = "quick"       # about 2 min for one of pyar's algorithms (slower per case)
CASE_TIMEOUT = 60.0     # seconds a case may take before it counts as a hang
TIME_LIMIT = 1800.0     # seconds for the whole run


def default_mpiexec() -> tuple[list[str], dict]:
    """(the command, the environment variables to add) that start this machine's jobs:
    :func:`pyar.runtime.launch.find_mpiexec`'s mpiexec with what its MPI library needs here
    (:func:`pyar.runtime.launch.launch_settings`: Open MPI's ``--oversubscribe``, its
    run-as-root variables and shared-memory transports), as ``make`` starts its jobs;
    ValueError if there is none."""
    try:
        words = shlex.split(find_mpiexec())
    except RuntimeError as e:
        raise ValueError(f"{e}, or give --mpiexec") from None
    extra, env = launch_settings(words[0])
    return [words[0], *extra, *words[1:]], env


class Job:
    """One MPI job of ``size`` ranks serving cases; restarted after a hang or a crash.

    Starting it (mpiexec, imports, MPI_Init on every rank) may take up to
    ``start_timeout`` seconds, counted apart from any case's timeout. ``env``: variables
    added to this process's environment for the job."""

    def __init__(self, size, mpiexec, load=(), start_timeout=120.0, env=None):
        self.size, self.mpiexec, self.load = size, list(mpiexec), list(load)
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.proc = None
        self.next_id = 0
        self.stderr_path = None

    def _start(self, until):
        """Start the job and wait for its ready line: None once it is up, else the verdict
        of the case that was to run (``cut`` at ``until``, ``crash`` if it died or did not
        come up within ``start_timeout``)."""
        import tempfile

        command = [*self.mpiexec, "-n", str(self.size), sys.executable, "-m", "mpi4py",
                   "-m", "pyar.verify.worker"]
        for spec in self.load:
            command += ["--load", spec]
        err = tempfile.NamedTemporaryFile("w+", prefix="pyar-verify-", suffix=".err",
                                          delete=False)
        self.stderr_path = err.name
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=err, text=True, bufsize=1, start_new_session=True,
                                     env={**os.environ, **self.env})
        err.close()
        self._buffer = ""
        began = time.monotonic()
        answer = self._answer(min(began + self.start_timeout, until), lambda a: "ready" in a)
        if answer == "died":
            return self._died("while starting")
        if answer == "timeout":
            tail = self.stderr_tail()
            self.kill()
            self._forget_stderr()
            if began + self.start_timeout > until:
                return _cut(began)
            return {"verdict": "crash", "seconds": 0, "problems": [
                f"the MPI job did not start within {self.start_timeout:g} s; its stderr ends: "
                f"{tail}"]}
        return None

    def stop(self):
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        self.proc = None
        self._forget_stderr()

    def _forget_stderr(self):
        if self.stderr_path:
            try:
                os.unlink(self.stderr_path)
            except OSError:
                pass
            self.stderr_path = None

    def kill(self):
        """End the job: SIGTERM to mpiexec, which ends its ranks (a SIGKILL would leave them
        running, in their own process groups), then SIGKILL if it is still there."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
            self.proc = None

    def stderr_tail(self, n=1500) -> str:
        try:
            return Path(self.stderr_path).read_text(errors="replace")[-n:]
        except (OSError, TypeError):
            return ""

    def run(self, target, case, timeout, nan="propagate", until=math.inf,
            int_overflow="wrap") -> dict:
        """The verdict of ``case`` (judged by rules ``nan`` and ``int_overflow``,
        :mod:`pyar.verify.judge`'s): pass, fail, unsupported (the target declined it),
        error, hang (no answer within ``timeout`` seconds), crash (the job died), or cut (the
        run's end, ``until`` on :func:`time.monotonic`'s clock, came first)."""
        if time.monotonic() >= until:
            return _cut(time.monotonic())
        if self.proc is None:
            trouble = self._start(until)
            if trouble:
                return trouble
        self.next_id += 1
        request = {"id": self.next_id, "target": target, "case": case, "nan": nan,
                   "int_overflow": int_overflow}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return self._died("during the case")
        sent = time.monotonic()
        answer = self._answer(min(sent + timeout, until), lambda a: a.get("id") == self.next_id)
        if answer == "died":
            return self._died("during the case")
        if answer == "timeout":
            self.kill()
            self._forget_stderr()
            if sent + timeout > until:
                return _cut(sent)
            return {"verdict": "hang", "seconds": round(time.monotonic() - sent, 2),
                    "problems": [f"no answer within {timeout:g} s (--case-timeout): it hangs"]}
        return answer

    def _answer(self, deadline, wanted):
        """The first answer line (its JSON) for which ``wanted`` holds, or "timeout" at
        ``deadline``, or "died" if the job's stdout closes."""
        fd = self.proc.stdout.fileno()
        while True:
            while "\n" in self._buffer:
                line, self._buffer = self._buffer.split("\n", 1)
                if line.startswith(C.PREFIX):
                    answer = json.loads(line[len(C.PREFIX):])
                    if wanted(answer):
                        return answer
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    return "died"
                self._buffer += data.decode(errors="replace")

    def _died(self, when):
        tail = self.stderr_tail()
        self.kill()
        self._forget_stderr()
        return {"verdict": "crash", "seconds": 0,
                "problems": [f"the MPI job died {when}; its stderr ends: {tail}"]}


def _cut(since) -> dict:
    return {"verdict": "cut", "seconds": round(time.monotonic() - since, 2),
            "problems": ["--time-limit reached first"]}


class Jobs:
    """A job per rank count and target setting, started on first use: ``jobs[size]`` the
    job of the targets that need none, ``jobs.job(size, spec, setting)`` that of a target
    with jobs of its own (:func:`pyar.verify.targets.own_job`: ``setting``, the variables
    its MPI_Init reads, added to the environment)."""

    def __init__(self, mpiexec, load=(), env=None):
        self.mpiexec, self.load, self.env, self.jobs = mpiexec, load, dict(env or {}), {}

    def __getitem__(self, size) -> Job:
        return self.job(size)

    def job(self, size, spec=None, setting=None) -> Job:
        key = (size, spec)
        if key not in self.jobs:
            self.jobs[key] = Job(size, self.mpiexec, self.load,
                                 env={**self.env, **(setting or {})})
        return self.jobs[key]

    def of(self, spec, setting) -> _TargetJobs:
        """The jobs of target ``spec`` (with ``setting``) by rank count, as ``smallest``
        takes them; the target's own, or the shared ones if ``spec`` is None."""
        return _TargetJobs(self, spec, setting)

    def stop(self, size=..., spec=...):
        """End the jobs of ``size`` ranks (of any if not given), of target ``spec`` only if
        given (idle ranks poll, taking cores)."""
        for key in [k for k in self.jobs if size in (..., k[0]) and spec in (..., k[1])]:
            self.jobs.pop(key).stop()

    def close(self):
        self.stop()


class _TargetJobs:
    def __init__(self, jobs, spec, setting):
        self.jobs, self.spec, self.setting = jobs, spec, setting

    def __getitem__(self, size) -> Job:
        return self.jobs.job(size, self.spec, self.setting)


def parse_ranks(text: str) -> list[int]:
    """``1-8``, ``2,3,5`` or a mix, as a sorted list of rank counts."""
    out = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = part.split("-")
                out.update(range(int(a), int(b) + 1))
            elif part:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"--ranks {text!r}: expected rank counts like 1-8 or 2,3,5") \
                from None
    if not out or min(out) < 1:
        raise ValueError(f"--ranks {text!r}: expected rank counts >= 1, like 1-8 or 2,3,5")
    return sorted(out)


def expand_targets(targets, collective: str = "allreduce", family: str = "") -> list[str]:
    """TARGETs with ``pyar:all`` as every registered algorithm of ``collective``, and
    ``mpi:all`` as every ``mpi:ALGO`` of the MPI library ``family``
    (:func:`pyar.verify.targets.mpi_algorithms`)."""
    out = []
    for t in targets:
        if t == "pyar:all":
            out += [f"pyar:{name}" for name in algorithms(collective) if name != LIBRARY]
        elif t == "mpi:all":
            out += [f"mpi:{name}" for name in T.mpi_algorithms(family)] or [t]
        else:
            out.append(t)
    return out


def check(targets, ranks=RANKS, profile=PROFILE, dims=None, case_timeout=CASE_TIMEOUT,
          mpiexec=None, load=(), shrink=True, shrink_examples=40, confirm=True, log=None,
          nan="propagate", time_limit=TIME_LIMIT, collective="allreduce",
          int_overflow="wrap", reproducible=False) -> Report:
    """Verify ``targets`` of ``collective`` (:data:`pyar.verify.cases.COLLECTIVES`; TARGET
    strings, a callable of an importable module, or a list of them) over ``ranks``; returns
    a :class:`Report` (true when every case ran and passed).

    Every case runs in MPI jobs this function starts, one rank count at a time: by
    ``mpiexec``, a command line used as it is (a cluster's launcher), else by
    :func:`default_mpiexec` (``$MPIEXEC`` or the embedded mpiexec, with what its library
    needs on this machine: as root, more ranks than cores); usable from a plain pytest (``assert
    check("mod:fn", ranks=[2, 3])``). A hang (no answer within ``case_timeout`` seconds)
    is the verdict of its target at that rank count: no further case runs there, so a
    deadlock costs one ``case_timeout`` (and a job start) per rank count. ``nan``: the rule
    for float max/min and NaN payloads (:data:`pyar.verify.judge.NAN_RULES`);
    ``int_overflow``: the rule for integer sum and prod
    (:data:`pyar.verify.judge.INT_OVERFLOW_RULES`). ``time_limit``: seconds for
    the whole run, shrinking included; what it does not reach is reported. ``shrink``:
    shrink one failure per target and kind of problem, trying at most ``shrink_examples``
    candidates; ``confirm``: rerun the smallest case in a fresh job. ``reproducible``: add the
    reproducible dimension (:mod:`pyar.verify.cases`) to ``dims`` and run every job (and
    reproducer) with ``PYAR_REPRODUCIBLE=1``, which pyar's own targets follow.
    """
    if collective not in C.COLLECTIVES:
        raise ValueError(f"--collective must be one of {', '.join(C.COLLECTIVES)}, got "
                         f"{collective!r}")
    if isinstance(targets, str) or callable(targets):
        targets = [targets]
    targets = [_spec(t) for t in targets]
    family = T.library_family() if any(T.own_job(t) for t in targets) else ""
    targets = expand_targets(targets, collective, family)
    settings = {t: T.setting(t, family) for t in targets}     # ValueError naming valid ones
    extra = {"PYAR_REPRODUCIBLE": "1"} if reproducible else {}
    if reproducible:
        dims = list(C.DEFAULT_DIMENSIONS if dims is None else dims)
        if "reproducible" not in dims:
            dims.append("reproducible")
    own = {t: t if T.own_job(t) else None for t in targets}
    sizes = ranks if isinstance(ranks, (list, tuple, range)) else parse_ranks(ranks)
    if nan not in judge.NAN_RULES:
        raise ValueError(f"--nan must be one of {', '.join(judge.NAN_RULES)}, got {nan!r}")
    if int_overflow not in judge.INT_OVERFLOW_RULES:
        raise ValueError(f"--int-overflow must be one of {', '.join(judge.INT_OVERFLOW_RULES)},"
                         f" got {int_overflow!r}")
    for name, value in (("--case-timeout", case_timeout), ("--time-limit", time_limit)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value}")
    if mpiexec:
        mpiexec, env = (shlex.split(mpiexec) if isinstance(mpiexec, str) else list(mpiexec)), {}
    else:
        mpiexec, env = default_mpiexec()
    load = [os.path.abspath(s) if s.endswith((".py", ".xml")) else s for s in load or ()]
    jobs = Jobs(mpiexec, load, {**env, **extra})
    report = Report(targets, list(sizes), profile, load, nan, time_limit, collective,
                    int_overflow, reproducible)
    started = time.monotonic()
    until = started + time_limit
    try:
        for size in sizes:
            sweep = C.sweep(size, profile, dims, collective)
            for target in targets:
                _run_sweep(jobs.job(size, own[target], settings[target]), target, sweep, report,
                           case_timeout, nan, until, log, int_overflow)
                if own[target]:
                    jobs.stop(size, own[target])
            jobs.stop(size)
        if shrink:
            stuck = {}              # target -> rank counts where it hangs: no candidate there
            for v in report.verdicts():
                if v["verdict"] in ("hangs", "error"):
                    stuck.setdefault(v["target"], set()).add(v["ranks"])
            for failure in report.first_failures():
                if time.monotonic() >= until:
                    break
                target = failure["target"]
                failure["smallest"] = smallest(jobs.of(own[target], settings[target]), failure,
                                               case_timeout, shrink_examples,
                                               confirm, log, nan, until,
                                               stuck.setdefault(failure["target"], set()),
                                               int_overflow)
                if own[target]:
                    jobs.stop(spec=own[target])
        report.name_reproducers(case_timeout, {t: {**s, **extra} if T.uses_pyar(t) else s
                                               for t, s in settings.items()})
    finally:
        jobs.close()
    report.seconds = time.monotonic() - started
    return report


def _run_sweep(job, target, sweep, report, case_timeout, nan, until, log,
               int_overflow="wrap"):
    """``sweep``'s cases of ``target`` on ``job`` into ``report``, up to the first hang or
    error (the rank count's verdict) or the end of the run (``until``)."""
    for i, case in enumerate(sweep):
        result = job.run(target, case, case_timeout, nan, until, int_overflow=int_overflow)
        if result["verdict"] == "cut":
            report.not_run(target, job.size, len(sweep) - i, "time-limit")
            return
        report.add(target, job.size, case, result)
        if log and result["verdict"] not in ("pass", "unsupported"):
            log(f"{target} on {job.size} ranks: {result['verdict']} {_brief(case)}")
        if result["verdict"] in ("hang", "error"):
            report.not_run(target, job.size, len(sweep) - i - 1, result["verdict"])
            return


def _spec(target) -> str:
    if isinstance(target, str):
        return target
    import inspect

    if callable(target):
        return f"{os.path.abspath(inspect.getfile(target))}:{target.__name__}"
    raise TypeError(f"a target is a TARGET string or a function, got {target!r}")


def _brief(case) -> str:
    skip = {"dim", "seed"}
    return ", ".join(f"{k}={v}" for k, v in case.items()
                     if k not in skip and C.BASE.get(k, None) != v or k in ("count", "dtype", "op"))


class Report:
    """Every case's verdict, the cases not run, and a verdict per target and rank count;
    ``bool(report)`` is whether every case ran and passed."""

    def __init__(self, targets, sizes, profile, load, nan="propagate", time_limit=None,
                 collective="allreduce", int_overflow="wrap", reproducible=False):
        self.targets, self.sizes, self.profile, self.load = targets, sizes, profile, load
        self.nan, self.time_limit, self.collective = nan, time_limit, collective
        self.int_overflow, self.reproducible = int_overflow, reproducible
        self.results = []           # {"target", "ranks", "case", "verdict", "problems", ...}
        self.skipped = []           # {"target", "ranks", "cases", "why"}: cases not run
        self.seconds = 0.0

    def add(self, target, size, case, result):
        self.results.append({"target": target, "ranks": size, "case": case, **result})

    def not_run(self, target, size, count, why):
        """``count`` cases of ``target`` on ``size`` ranks not run, ``why``: after a hang or
        an error there, or at the time limit."""
        if count:
            self.skipped.append({"target": target, "ranks": size, "cases": count, "why": why})

    @property
    def failures(self):
        return [r for r in self.results if r["verdict"] not in ("pass", "unsupported")]

    @property
    def unreached(self):
        """What the time limit left out: ``{"target", "ranks", "cases", "why"}`` each."""
        return [s for s in self.skipped if s["why"] == "time-limit"]

    @property
    def unlike(self):
        """Where targets that each passed a case of the reproducible dimension on the same
        ranks give different bits (reproducible sums the same whatever the algorithm):
        ``{"ranks", "case", "groups"}`` each, ``groups`` the targets by the bits they gave."""
        seen = {}
        for r in self.results:
            if "digest" in r:
                key = (r["ranks"], json.dumps(r["case"], sort_keys=True))
                seen.setdefault(key, {}).setdefault(r["digest"], []).append(r["target"])
        return [{"ranks": ranks, "case": json.loads(case), "groups": list(groups.values())}
                for (ranks, case), groups in seen.items() if len(groups) > 1]

    def __bool__(self):
        return not self.failures and not self.skipped and not self.unlike

    def verdicts(self) -> list[dict]:
        """Per target and rank count: ``verdict`` (passed, failed, hangs, error, incomplete:
        cut short by the time limit, not reached: none run), ``cases`` run (``unsupported``
        of them declined by the target: passed if the rest did), ``not_run``, and
        for hangs and errors the ``case``."""
        out = []
        for target in self.targets:
            for size in self.sizes:
                rows = [r for r in self.results if r["target"] == target and r["ranks"] == size]
                skipped = [s for s in self.skipped if s["target"] == target and s["ranks"] == size]
                seen = {r["verdict"] for r in rows}
                entry = {"target": target, "ranks": size, "cases": len(rows),
                         "unsupported": sum(r["verdict"] == "unsupported" for r in rows),
                         "not_run": sum(s["cases"] for s in skipped)}
                stop = next((r for r in rows if r["verdict"] in ("hang", "error")), None)
                if stop:
                    entry.update(verdict="hangs" if stop["verdict"] == "hang" else "error",
                                 case=stop["case"])
                elif seen & {"fail", "crash"}:
                    entry["verdict"] = "failed"
                elif skipped:
                    entry["verdict"] = "incomplete" if rows else "not reached"
                else:
                    entry["verdict"] = "passed"
                out.append(entry)
        return out

    def first_failures(self):
        """One failure per target and kind of problem to shrink: the first seen."""
        seen, out = set(), []
        for r in self.failures:
            if r["verdict"] in ("hang", "crash", "error"):
                continue
            key = (r["target"], _kind(r))
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    def name_reproducers(self, timeout, settings=None):
        """Name each distinct smallest case ``repro_K.py`` and write its script under that
        name (the same case found twice shares one), and its standalone script, which needs
        no pyar, ``repro_K_standalone.py`` (:func:`pyar.verify.standalone.script`); each
        sets its target's ``settings`` (target -> variables) before MPI_Init."""
        settings = settings or {}
        names = {}
        for r in self.results:
            small = r.get("smallest")
            if not small:
                continue
            key = (r["target"], small["ranks"], json.dumps(small["case"], sort_keys=True))
            names.setdefault(key, f"repro_{len(names) + 1}.py")
            small["name"] = names[key]
            small["script"] = reproducer(r["target"], small["ranks"], small["case"], self.load,
                                         timeout, self.nan, small["name"], self.int_overflow,
                                         settings.get(r["target"]))
            small["standalone_name"] = small["name"].replace(".py", "_standalone.py")
            small["standalone"] = standalone.script(
                r["target"], small["ranks"], small["case"], self.load, self.nan,
                self.int_overflow, small["problems"], small["standalone_name"],
                settings.get(r["target"]))

    def unsupported(self) -> dict:
        """Per target, what it declined (NotImplementedError): ``{(dtype, op): [the cases,
        the target's words]}``, not failures."""
        out = {}
        for r in self.results:
            if r["verdict"] == "unsupported":
                entry = out.setdefault(r["target"], {}).setdefault(
                    (r["case"]["dtype"], r["case"]["op"]), [0, r.get("unsupported", "")])
                entry[0] += 1
        return out

    def declined(self) -> str:
        """A line per target that declined cases: how many, the dtypes (and ops) and why."""
        lines = []
        for target, found in self.unsupported().items():
            dtypes = {}
            for (dtype, op), (n, why) in found.items():
                dtypes.setdefault(dtype, []).append(op)
            reasons = sorted({why for _, why in found.values()})
            lines.append(f"# unsupported by {target} (NotImplementedError: not run, not "
                         f"failed): {sum(n for n, _ in found.values())} cases, "
                         + ", ".join(f"{d} ({' '.join(ops)})" for d, ops in dtypes.items())
                         + f"; it says: {reasons[0]}"
                         + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""))
        return "\n".join(lines)

    def table(self) -> str:
        verdicts = ["pass", "fail", "hang", "crash", "error", "unsupported"]
        w = max([len(t) for t in self.targets] + [6]) + 2
        lines = [f"# {'target':<{w}}{'dimension':<12}"
                 + "".join(f"{v if v != 'unsupported' else 'unsup':>7}" for v in verdicts)]
        for target in self.targets:
            for dim in C.DIMENSIONS:
                rows = [r for r in self.results if r["target"] == target
                        and r["case"]["dim"] == dim]
                if not rows:
                    continue
                counts = [sum(r["verdict"] == v for r in rows) for v in verdicts]
                lines.append(f"  {target:<{w}}{dim:<12}" + "".join(f"{n:>7}" for n in counts))
        return "\n".join(lines)

    def by_ranks(self) -> str:
        """A line per target: its verdict at each rank count; a line per hang or error."""
        lines = ["# by rank count"]
        entries = self.verdicts()
        for target in self.targets:
            mine = [e for e in entries if e["target"] == target]
            lines.append(f"  {target}: " + ", ".join(f"{e['ranks']} {e['verdict']}"
                                                     for e in mine))
            for e in mine:
                if "case" in e:
                    lines.append(f"    {e['verdict']} on {e['ranks']} ranks at "
                                 f"{e['case']['dim']}: {_brief(e['case'])} (case {e['cases']} of "
                                 f"{e['cases'] + e['not_run']}; the rest not run there)")
        if self.unreached:
            lines.append(f"# not reached within --time-limit {self.time_limit:g} s: " + "; ".join(
                f"{s['target']} on {s['ranks']} ranks, {s['cases']} cases"
                for s in self.unreached))
        return "\n".join(lines)

    def text(self) -> str:
        ok = "FAILED" if self.failures or self.unlike else (
            "INCOMPLETE" if self.skipped else "PASSED")
        head = (f"# pyar verify --collective {self.collective}: {', '.join(self.targets)} on "
                f"ranks {','.join(map(str, self.sizes))}, profile {self.profile}, "
                f"--nan {self.nan}, --int-overflow {self.int_overflow}"
                f"{', --reproducible' if self.reproducible else ''}: {len(self.results)} "
                f"cases in {self.seconds:.0f} s: {ok}")
        parts = [head, self.table(), self.by_ranks(), *filter(None, [self.declined()])]
        for r in self.failures[:40]:
            parts.append(f"- {r['verdict']}: {r['target']} on {r['ranks']} ranks, {_brief(r['case'])}:"
                         f" {'; '.join(r['problems'][:3])[:600]}")
        if len(self.failures) > 40:
            parts.append(f"- ... and {len(self.failures) - 40} more (--json has them all)")
        for u in self.unlike[:10]:
            parts.append(f"- the targets differ: on {u['ranks']} ranks, {_brief(u['case'])}, "
                         "each reproducible, they give other bits: "
                         + " | ".join(", ".join(g) for g in u["groups"]))
        shown = set()
        for r in self.results:
            small = r.get("smallest")
            if small and small["name"] not in shown:
                shown.add(small["name"])
                parts.append(f"\n## {small['name']}: smallest failing case of {r['target']} "
                             f"({r['case']['dim']}): {small['ranks']} ranks, "
                             f"{_brief(small['case'])}\n"
                             f"# {small['note']}\n"
                             f"# {'; '.join(small['problems'][:2])[:400]}\n"
                             + small["script"]
                             + f"# standalone, mpi4py and numpy only, for the library's bug "
                             f"tracker: {small['standalone_name']} (--repro-dir writes it, "
                             f"--json holds it)")
        return "\n".join(parts)

    def to_json(self) -> dict:
        return {"collective": self.collective, "targets": self.targets, "ranks": self.sizes,
                "profile": self.profile, "nan": self.nan, "int_overflow": self.int_overflow,
                "reproducible": self.reproducible, "time_limit": self.time_limit,
                "passed": bool(self), "seconds": round(self.seconds, 1), "verdicts": self.verdicts(),
                "unlike": self.unlike,
                "not_run": self.skipped, "results": self.results}


def _kind(result) -> tuple:
    """What went wrong, in a few words: wrong elements (by float or integer, and op), x
    modified, out or in place not holding the result, ranks differing, an exception..."""
    text = " ".join(result["problems"])
    for kind in ("raised", "x was modified", "does not hold", "differ bitwise",
                 "user's message", "returned"):
        if kind in text:
            return (kind,)
    case = result["case"]
    return ("elements wrong", case["dtype"] in C.FLOATS, case["op"])


ORDER = {"dtype": ["int32", "int64", "float32", "float64", "int8", "int16", "uint8", "uint16",
                   "uint32", "uint64", "float16", "bfloat16"],
         "op": ["sum", "max", "min", "prod", "avg"],
         "layout": C.LAYOUTS, "mode": C.MODES, "values": C.VALUES}


def smallest(jobs, failure, case_timeout, examples, confirm=True, log=None,
             nan="propagate", until=math.inf, hung=None, int_overflow="wrap") -> dict:
    """The smallest case failing as ``failure`` does (the same kind of problem) that
    hypothesis finds among those no more complex than ``failure``'s (by rule ``nan``),
    before ``until``; the failure itself if it finds none smaller. No candidate runs on a rank count in ``hung`` (a set: where the target hangs
    or cannot load), and one that hangs adds its rank count to it. The reproducer's script
    comes from :meth:`Report.name_reproducers`."""
    from hypothesis import HealthCheck, Phase, find, settings, strategies as st
    from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes
    from hypothesis.errors import NoSuchExample

    case, size, target = failure["case"], failure["ranks"], failure["target"]
    kind = _kind(failure)
    fresh_job = case["calls"] > 1          # may depend on history: a fresh job per candidate
    examples = min(examples, 6) if fresh_job else examples
    tried = [0]
    hung = set() if hung is None else hung

    def options(field):                 # simplest first: hypothesis shrinks towards it
        return st.integers(0, ORDER[field].index(case[field])).map(ORDER[field].__getitem__)

    fields = {"ranks": st.integers(1, size), "count": st.integers(0, case["count"]),
              **{f: options(f) for f in ORDER}, "calls": st.integers(1, case["calls"]),
              "interleave": st.integers(0, int(case["interleave"])).map(bool)}
    candidates = st.fixed_dictionaries(fields)
    # The failure itself is hypothesis's first example (replayed from its database, as a
    # failure of an earlier run would be), so shrinking starts from it.
    start = [size, case["count"], *(ORDER[f].index(case[f]) for f in ORDER), case["calls"],
             int(case["interleave"])]
    database = InMemoryExampleDatabase()
    database.save(b"pyar-verify", choices_to_bytes(start))
    found, seen = {}, {}

    def fails(c):
        candidate = {**case, **{k: v for k, v in c.items() if k != "ranks"}}
        key = json.dumps([c["ranks"], candidate], sort_keys=True)
        if key in seen:
            return seen[key]
        if not C.valid(candidate) or tried[0] >= examples or time.monotonic() >= until \
                or c["ranks"] in hung:
            return False
        tried[0] += 1
        seen[key] = verdict = _fails(c, candidate, key)
        return verdict

    def _fails(c, candidate, key):
        job = jobs[c["ranks"]]
        if fresh_job:
            job.stop()
        result = job.run(target, candidate, case_timeout, nan, until, int_overflow=int_overflow)
        if result["verdict"] in ("hang", "error"):
            hung.add(c["ranks"])
        if result["verdict"] == "fail" and _kind({**result, "case": candidate}) == kind:
            found[key] = result["problems"]
            return True
        return False        # (a failure of another kind is not this one made smaller)

    note = "smallest found by hypothesis"
    try:
        best = find(candidates, fails, database_key=b"pyar-verify",
                    settings=settings(max_examples=examples, database=database, deadline=None,
                                      phases=[Phase.reuse, Phase.generate, Phase.shrink],
                                      suppress_health_check=list(HealthCheck)))
        ranks, small = best["ranks"], {**case, **{k: v for k, v in best.items() if k != "ranks"}}
        problems = found[json.dumps([ranks, small], sort_keys=True)]
    except NoSuchExample:
        ranks, small, problems = size, case, failure["problems"]
        note = f"hypothesis found no smaller failing case in {tried[0]} tries: the case as seen"
    note += f" ({tried[0]} candidates run{', each in a fresh job' if fresh_job else ''}"
    note += "; stopped at --time-limit)" if time.monotonic() >= until else ")"
    confirmed = None
    if confirm and time.monotonic() < until:
        job = jobs[ranks]
        job.stop()
        confirmed = job.run(target, small, case_timeout, nan, until,
                            int_overflow=int_overflow)["verdict"] == "fail"
        note += f"; rerun in a fresh job: {'fails' if confirmed else 'PASSES'}"
    if log:
        log(f"{target}: smallest failing case {ranks} ranks, {_brief(small)} ({note})")
    return {"ranks": ranks, "case": small, "problems": problems, "note": note,
            "confirmed": confirmed}


def reproducer(target, ranks, case, load=(), timeout=60, nan="propagate",
               name="repro.py", int_overflow="wrap", setting=None) -> str:
    """The script ``name`` that runs ``case`` of ``target`` alone (judged by rules ``nan``
    and ``int_overflow``), with its mpiexec line first; it sets ``setting``'s variables
    (``mpi:ALGO``'s) before MPI_Init."""
    if ":" in target and target.split(":")[0].endswith(".py"):
        path, fn = target.rsplit(":", 1)
        target = f"{os.path.abspath(path)}:{fn}"
    env = (f"import os\nos.environ.update({setting!r})     # before MPI_Init: its settings\n"
           if setting else "")
    return (f"# timeout -k 5 {int(timeout)} mpiexec -n {ranks} python {name}\n"
            f"# (exit status 1 while {target} fails this case, 0 once it passes)\n"
            f"{env}from pyar.verify.worker import reproduce\n\n"
            f"case = {case!r}\n"
            f"raise SystemExit(reproduce({target!r}, case, load={list(load)!r}, nan={nan!r}, "
            f"int_overflow={int_overflow!r}))\n")


def command(args) -> int:
    """``pyar verify``: what cli.py parsed, run and reported; exit status 0 only if every
    case ran and passed (or, with ``--list-targets``, the named targets listed)."""
    if args.list_targets:
        print(T.listing(T.library_family(args.mpiexec), args.collective))
        return 0
    if not args.target:
        raise ValueError("expected a TARGET (or --list-targets): module:function, pyar:ALGO, "
                         "mpi, mpi:ALGO or torch:BACKEND")
    dims = None if args.dims is None else [d.strip() for d in args.dims.split(",") if d.strip()]
    if args.skip:
        skip = [d.strip() for d in args.skip.split(",") if d.strip()]
        C.sweep(1, "smoke", skip)               # ValueError naming the dimensions
        dims = [d for d in (C.DEFAULT_DIMENSIONS if dims is None else dims) if d not in skip]
    profile = "quick" if args.quick else args.profile
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # jobs end with us (finally)
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else None
    report = check(args.target, ranks=args.ranks, profile=profile, dims=dims,
                   case_timeout=args.case_timeout, mpiexec=args.mpiexec, load=args.load,
                   shrink=not args.no_shrink, log=log, nan=args.nan, time_limit=args.time_limit,
                   collective=args.collective, int_overflow=args.int_overflow,
                   reproducible=args.reproducible)
    print(report.text(), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1)
        print(f"# json: {args.json}")
    if args.repro_dir:
        os.makedirs(args.repro_dir, exist_ok=True)
        written = set()
        for r in report.results:
            small = r.get("smallest")
            if small and small["name"] not in written:
                written.add(small["name"])
                for name, text in ((small["name"], small["script"]),
                                   (small["standalone_name"], small["standalone"])):
                    path = os.path.join(args.repro_dir, name)
                    with open(path, "w") as f:
                        f.write(text)
                    print(f"# reproducer: {path}")
    return 0 if report else 1
