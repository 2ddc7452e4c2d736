"""What ``pyar verify`` finds in the MPI library installed and in torch's gloo, as a docs page
(``make verify-report``: docs/verify-report.md).

``run`` runs ``pyar verify TARGET --json`` under the given python (the venv of the MPI
library) for each target (default: every ``mpi:ALGO`` of the library, ``mpi`` itself and
``torch:gloo``), one after another, each bounded by ``--time-limit``, and writes each
target's JSON, with ``run.json`` (the library's version, torch's, the options), into
``--out``. ``write`` turns such directories (one a library) into the page: per target the cases passed,
failed and unsupported at each rank count, the deviations found grouped by their class
(the report's words: NaN payload only, sign of zero only, numeric, the integer arithmetic
seen), and each shrunk failure's standalone reproducer (mpi4py and numpy only). The page
holds that run's words and numbers only, and says which library, version, ranks and
profile produced it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _library(python: str) -> dict:
    """The MPI library's first line of MPI_Get_library_version and torch's version, as
    ``python`` sees them (a process of its own: MPI starts there, not here)."""
    code = ("from mpi4py import MPI; import json, importlib.util as u; "
            "t = __import__('torch').__version__ if u.find_spec('torch') else None; "
            "print(json.dumps({'mpi': ' '.join(MPI.Get_library_version().split('\\n')[0]"
            ".split()), 'torch': t}))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _mpi_targets(python: str) -> list[str]:
    out = subprocess.run([python, "-m", "pyar", "verify", "--list-targets"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         check=True).stdout
    return [line for line in out.splitlines() if line.startswith("mpi:")]


def run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    library = _library(args.python)
    targets = args.targets or ["mpi", *_mpi_targets(args.python),
                               *(["torch:gloo"] if library["torch"] else [])]
    info = {**library, "ranks": args.ranks, "profile": args.profile,
            "nan": args.nan, "int_overflow": args.int_overflow, "targets": targets,
            "time_limit": args.time_limit}
    files = []
    for i, target in enumerate(targets):
        path = out / f"{i:02d}-{re.sub(r'[^A-Za-z0-9_]+', '_', target)}.json"
        command = [args.python, "-m", "pyar", "verify", target, "--profile", args.profile,
                   "--ranks", args.ranks, "--nan", args.nan, "--int-overflow",
                   args.int_overflow, "--time-limit", str(args.time_limit), "--json", str(path)]
        print("$", " ".join(command[1:]), flush=True)
        proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                              timeout=args.time_limit + 300)
        print(proc.stdout.splitlines()[0] if proc.stdout else proc.stderr[-2000:], flush=True)
        if not path.exists():
            raise SystemExit(f"pyar verify {target} wrote no JSON (exit {proc.returncode}): "
                             f"{proc.stderr[-2000:]}")
        files.append(path.name)
    (out / "run.json").write_text(json.dumps({**info, "files": files}, indent=1))


CLASS = re.compile(r"\((NaN payload only|sign of zero only|numeric[^)]*)\)")


def _class(result) -> str:
    """A failure's class in the report's words (its first problem's)."""
    text = (result["problems"] or [""])[0]
    found = CLASS.search(text)
    if found:
        return f"ranks differ bitwise ({found.group(1)})"
    rules = re.findall(r"\[([^\][]{20,})\]", text)        # the rule a failure breaks
    if rules:
        rule = rules[-1].split(";")[0]
        overflow = re.match(r"of \d+ elements whose (\w+) overflows (\w+) in some order, "
                            r"([^:]*): (.*)", rule)
        if overflow:                    # the arithmetic seen, less the counts of this case
            what, dtype, seen, why = overflow.groups()
            return (f"{dtype} {what} overflow "
                    f"{'saturates' if 'saturate' in seen else 'neither wraps nor saturates'}"
                    f": {why}")
        return rule[:240]
    for kind in ("x was modified", "does not hold", "user's message", "raised", "returned",
                 "elements wrong"):
        if kind in text:
            return kind
    return result["verdict"]


def _quote(problems, limit=400) -> str:
    text = "; ".join(problems[:1]).replace("`", "")
    return f"`{text[:limit]}{' ...' if len(text) > limit else ''}`"


def _brief(case) -> str:
    keep = ("count", "dtype", "op", "layout", "mode", "values", "calls")
    return ", ".join(f"{k}={case[k]}" for k in keep if k in case)


def _label(library: str) -> str:
    """``MPICH 5.0.2`` or ``Open MPI 5.0.11`` from MPI_Get_library_version's first line (which
    may hold a build date: the page keeps the name and version only)."""
    found = re.search(r"(MPICH|Open MPI|Intel\(R\) MPI|MVAPICH\S*)\D*?(\d+(\.\d+)+)", library)
    return f"{found.group(1)} {found.group(2)}" if found else library[:40]


def _section(data, label) -> list[str]:
    target = data["targets"][0]
    results = data["results"]
    lines = [f"### {label}: {target}", ""]
    verdicts = ["pass", "fail", "unsupported", "hang", "crash", "error"]
    lines += ["| ranks | " + " | ".join(verdicts) + " | not run | verdict |",
              "|---|" + "---|" * (len(verdicts) + 2)]
    for v in data["verdicts"]:
        rows = [r for r in results if r["ranks"] == v["ranks"]]
        counts = [sum(r["verdict"] == k for r in rows) for k in verdicts]
        lines.append(f"| {v['ranks']} | " + " | ".join(map(str, counts))
                     + f" | {v['not_run']} | {v['verdict']} |")
    lines += ["", f"{len(results)} cases in {data['seconds']:.0f} s."]
    declined, words = {}, {}
    for r in results:
        if r["verdict"] == "unsupported":
            ops = declined.setdefault(r["case"]["dtype"], [])
            if r["case"]["op"] not in ops:
                ops.append(r["case"]["op"])
            words.setdefault(r.get("unsupported", ""), r["case"]["dtype"])
    if declined:
        lines += ["", f"**Unsupported** (the target declines them: not run, not failed): "
                      f"{sum(r['verdict'] == 'unsupported' for r in results)} cases, "
                  + ", ".join(f"{d} ({' '.join(ops)})" for d, ops in declined.items())
                  + f". It says{', e.g.' if len(words) > 1 else ''}: `{next(iter(words))}`."]
    groups = {}
    for r in results:
        if r["verdict"] not in ("pass", "unsupported"):
            groups.setdefault(_class(r), []).append(r)
    if groups:
        lines += ["", "**Deviations found** (by class; the first case of each as the report "
                      "words it):", ""]
        for cls, rows in groups.items():
            first = rows[0]
            ranks = sorted({r["ranks"] for r in rows})
            lines.append(f"- {cls}: {len(rows)} cases (ranks {', '.join(map(str, ranks))}); "
                         f"e.g. {first['ranks']} ranks, {_brief(first['case'])}: "
                         f"{_quote(first['problems'])}")
    else:
        lines += ["", "No deviation found."]
    shown = set()
    for r in results:
        small = r.get("smallest")
        if not small or small["name"] in shown:
            continue
        shown.add(small["name"])
        lines += ["", f"#### {label}: {target}: {small['standalone_name']}", "",
                  f"Smallest failing case: {small['ranks']} ranks, {_brief(small['case'])} "
                  f"({small['note']}). What it shows: {_quote(small['problems'])}", "",
                  "<!-- skip: a reproducer: it exits 1 while the library fails the case -->",
                  "```python", small["standalone"].rstrip("\n"), "```"]
    return lines


def _library_part(out: Path) -> list[str]:
    info = json.loads((out / "run.json").read_text())
    runs = [json.loads((out / name).read_text()) for name in info["files"]]
    label = _label(info["mpi"])
    lines = [f"## {label}", "",
             f"Generated by `make verify-report` (scripts/verify_report.py) with {label}"
             + (f", torch {info['torch']}" if info.get("torch") else "")
             + f", on ranks {info['ranks']}, profile {info['profile']}, `--nan {info['nan']} "
             f"--int-overflow {info['int_overflow']}`, each target's run bounded by "
             f"`--time-limit {info['time_limit']:g}`.", "",
             "| target | cases | passed | failed | unsupported | not run | by rank count |",
             "|---|---|---|---|---|---|---|"]
    for data in runs:
        res = data["results"]
        count = {k: sum(r["verdict"] == k for r in res) for k in ("pass", "unsupported")}
        failed = len(res) - count["pass"] - count["unsupported"]
        not_run = sum(s["cases"] for s in data["not_run"])
        by = ", ".join(f"{v['ranks']} {v['verdict']}" for v in data["verdicts"])
        target = data["targets"][0]
        lines.append(f"| [{target}](#{_anchor(f'{label}: {target}')}) | {len(res)} "
                     f"| {count['pass']} | {failed} | {count['unsupported']} | {not_run} | "
                     f"{by} |")
    for data in runs:
        lines += ["", *_section(data, label)]
    return lines


def write(args) -> None:
    lines = ["# What pyar verify finds in real libraries", "",
             "Each target is `pyar verify TARGET` as [Checking your allreduce](guides/verify.md)"
             " describes it: `mpi` is the MPI library's MPI_Allreduce, `mpi:ALGO` that with "
             "ALGO forced by the library's own settings, `torch:gloo` torch.distributed's gloo "
             "backend. A deviation is what pyar's rules reject "
             "([what it judges](guides/verify.md#what-it-judges)); each says where MPI's own "
             "rules accept it (`--nan mpi`, `--int-overflow any`). Every failure's smallest "
             "case comes as a standalone script (mpi4py and numpy only) for the library's bug "
             "tracker. This page is generated: the words and numbers are that run's."]
    for out in args.out:
        lines += ["", *_library_part(Path(out))]
    Path(args.markdown).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.markdown}")


def _anchor(title: str) -> str:
    """The anchor mkdocs' toc gives a heading: lower case, punctuation dropped, spaces as
    dashes."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\- ]", "", title.lower()).strip())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run pyar verify on each target")
    p.add_argument("--out", required=True, help="the directory of the run's JSON")
    p.add_argument("--python", default=sys.executable, help="the venv's python")
    p.add_argument("--ranks", default="1-5")
    p.add_argument("--profile", default="quick", choices=["full", "quick", "smoke"])
    p.add_argument("--nan", default="propagate", choices=["propagate", "mpi"])
    p.add_argument("--int-overflow", default="wrap", choices=["wrap", "any"])
    p.add_argument("--time-limit", type=float, default=900,
                   help="seconds for each target (pyar verify --time-limit)")
    p.add_argument("targets", nargs="*", help="default: mpi, every mpi:ALGO, torch:gloo (if "
                   "the venv has torch)")
    p = sub.add_parser("write", help="write the page from runs' directories")
    p.add_argument("--out", required=True, action="append",
                   help="the directory of a run's JSON (again for another library's)")
    p.add_argument("--markdown", required=True, help="the page to write")
    args = parser.parse_args(argv)
    (run if args.command == "run" else write)(args)


if __name__ == "__main__":
    main()
