"""The judge of ``pyar verify`` (no MPI): honest results in any order pass, the bugs it is
for do not, under either NaN rule; the cases and the reproducers are well formed; a hang is
its rank count's verdict and ends it, and the time limit's cut is reported (with jobs
faked)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pyar.verify import cases as C, driver, judge

FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
NAMES = {np.float16: "float16", ml_dtypes.bfloat16: "bfloat16", np.float32: "float32",
         np.float64: "float64"}


def ordered(inputs, order, fold, dtype):
    """``inputs`` folded in ``order`` (a permutation), rounding to ``dtype`` at each step."""
    acc = inputs[order[0]].astype(dtype)
    for i in order[1:]:
        acc = fold(acc, inputs[i].astype(dtype)).astype(dtype)
    return acc


def tree(inputs, fold, dtype):
    """``inputs`` folded pairwise (recursive halving's order)."""
    level = [x.astype(dtype) for x in inputs]
    while len(level) > 1:
        level = [fold(level[i], level[i + 1]).astype(dtype) if i + 1 < len(level)
                 else level[i] for i in range(0, len(level), 2)]
    return level[0]


@settings(max_examples=80)
@given(dtype=st.sampled_from(FLOATS), size=st.integers(1, 8), op=st.sampled_from(["sum", "prod"]),
       data=st.data())
def test_any_order_of_an_honest_float_sum_or_product_passes(dtype, size, op, data):
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    scale = 2.0 ** rng.integers(-6, 6, (size, 64)) if op == "sum" else 1.0
    values = rng.standard_normal((size, 64)) * scale if op == "sum" else \
        rng.uniform(0.5, 2.0, (size, 64)) * rng.choice([-1, 1], (size, 64))
    inputs = [v.astype(dtype) for v in values]
    fold = np.add if op == "sum" else np.multiply
    order = data.draw(st.permutations(range(size)))
    with np.errstate(over="ignore"):
        for result in (ordered(inputs, order, fold, dtype), tree(inputs, fold, dtype)):
            assert judge.wrong(result, inputs, op, NAMES[dtype]).size == 0


def test_float32_accumulated_in_float16_is_caught():
    rng = np.random.default_rng(1)
    inputs = [(rng.standard_normal(256) * 100).astype(np.float32) for _ in range(4)]
    half = ordered(inputs, range(4), np.add, np.float16).astype(np.float32)
    assert judge.wrong(half, inputs, "sum", "float32").size > 100


def test_half_types_must_accumulate_in_float32():
    inputs = [np.array([60000.0, 1.0], np.float16), np.array([60000.0, 2.0], np.float16),
              np.array([-60000.0, 3.0], np.float16)]
    with np.errstate(over="ignore"):
        half = ordered(inputs, [0, 1, 2], np.add, np.float16)      # 60000 + 60000 = inf
    assert half[0] == np.inf
    assert judge.wrong(half, inputs, "sum", "float16").tolist() == [0]     # exact: 60000
    mixed = [np.array([60000.0, np.inf], np.float16), np.array([60000.0, 1.0], np.float16),
             np.array([-60000.0, 1.0], np.float16)]
    both = np.array([np.inf, 5.0], np.float16)      # [1] should be inf (an input is)
    assert judge.wrong(both, mixed, "sum", "float16").tolist() == [0, 1]
    assert "must be accumulated in float32" in judge.broken_rule(both, mixed, [0, 1], "sum",
                                                                 "float16", "propagate")
    assert judge.broken_rule(both, mixed, [1], "sum", "float16", "propagate") == ""
    for order in ([0, 1, 2], [0, 2, 1]):
        wide = ordered(inputs, order, np.add, np.float32).astype(np.float16)
        assert judge.wrong(wide, inputs, "sum", "float16").size == 0
    beyond = [np.array([60000.0, 60000.0], np.float16)] * 2       # exact 120000: inf is right
    assert judge.wrong(np.array([np.inf, np.inf], np.float16), beyond, "sum", "float16").size == 0
    assert judge.wrong(np.array([-np.inf, 60000.0], np.float16), beyond, "avg",
                       "float16").tolist() == [0]
    with np.errstate(over="ignore"):                # avg summed first in the half type: inf
        assert judge.wrong((ordered(beyond, [0, 1], np.add, np.float16) / 2).astype(np.float16),
                           beyond, "avg", "float16").tolist() == [0, 1]
    bf = [np.array([3e38], ml_dtypes.bfloat16)] * 2 + [np.array([-3e38], ml_dtypes.bfloat16)]
    with np.errstate(over="ignore"):                # float32 itself overflows: no false alarm
        assert ordered(bf, [0, 1, 2], np.add, np.float32)[0] == np.inf
    assert judge.wrong(np.array([np.inf], ml_dtypes.bfloat16), bf, "sum", "bfloat16").size == 0


@settings(max_examples=40)
@given(dtype=st.sampled_from(["float16", "bfloat16"]), size=st.integers(2, 8),
       seed=st.integers(0, 1000), data=st.data())
def test_half_cancel_values_catch_half_accumulation_and_pass_float32(dtype, size, seed, data):
    case = {**C.BASE, "dim": "values", "values": "halfcancel", "dtype": dtype, "seed": seed,
            "count": 64}
    order = data.draw(st.permutations(range(size)))
    half = np.dtype(C.dtype_of(case))
    for op in ("sum", "avg"):
        inputs = [C.contribution({**case, "op": op}, r, 0) for r in range(size)]
        exact = np.stack(inputs).astype(np.float64).sum(axis=0)
        assert np.isfinite(exact).all()
        wide = ordered(inputs, order, np.add, np.float32)
        wide = wide / np.float32(size) if op == "avg" else wide
        with np.errstate(over="ignore"):        # an exact sum beyond the half type: inf
            assert judge.wrong(wide.astype(half), inputs, op, dtype).size == 0
            narrow = ordered(inputs, order, np.add, half)
            narrow = (narrow / half.type(size)).astype(half) if op == "avg" else narrow
        if op == "avg" or size > 2:         # two terms: one rounding, the same as float32's
            assert judge.wrong(narrow, inputs, op, dtype).size > 0


def test_nan_in_max_and_min_by_either_rule():
    nan = np.nan
    inputs = [np.array([nan, 1.0, 0.0, nan, 4.0]), np.array([5.0, 2.0, -0.0, nan, nan]),
              np.array([3.0, 0.5, 0.0, nan, 1.0])]
    mpi_like = np.array([3.0, 2.0, -0.0, nan, nan])           # NaN lost, kept, both
    assert judge.wrong(mpi_like, inputs, "max", "float64").tolist() == [0]
    assert judge.wrong(mpi_like, inputs, "max", "float64", nan="mpi").size == 0
    assert judge.wrong(np.array([4.0, 2.0, 0.0, nan, 4.0]), inputs, "max", "float64",
                       nan="mpi").tolist() == [0]               # 4.0: no rank's value there
    assert judge.wrong(np.array([nan, 2.0, 0.0, 1.0, nan]), inputs, "max", "float64",
                       nan="mpi").tolist() == [3]               # all NaN: NaN under both
    assert judge.wrong(np.array([nan, 1.0, 0.0, nan, nan]), inputs, "max", "float64",
                       nan="mpi").tolist() == [1]               # no NaN: exact under both
    said = judge.broken_rule(mpi_like, inputs, [0], "max", "float64", "propagate")
    assert "--nan propagate" in said and "--nan mpi" in said
    said = judge.broken_rule(np.array([4.0]), [x[:1] for x in inputs], [0], "max", "float64",
                             "mpi")
    assert "under --nan mpi" in said and "--nan propagate" in said
    assert judge.broken_rule(np.array([9.0]), [x[1:2] for x in inputs], [0], "max", "float64",
                             "propagate") == ""


def test_ieee_specials_give_the_ieee_result():
    inputs = [np.array([np.inf, np.nan, np.inf, 1.0], np.float32),
              np.array([1.0, 1.0, -np.inf, np.inf], np.float32)]
    expected = np.array([np.inf, np.nan, np.nan, np.inf], np.float32)
    assert judge.wrong(expected, inputs, "sum", "float32").size == 0
    assert judge.wrong(np.array([np.inf, 2.0, np.nan, np.inf], np.float32), inputs, "sum",
                       "float32").tolist() == [1]


@settings(max_examples=60)
@given(dtype=st.sampled_from(["int8", "uint8", "int32", "uint64", "int64"]),
       op=st.sampled_from(["sum", "prod", "max", "min"]), size=st.integers(1, 8),
       seed=st.integers(0, 2 ** 32 - 1), order=st.randoms(use_true_random=False))
def test_integers_are_exact_and_wrap_as_in_c(dtype, op, size, seed, order):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(info.min, info.max, 16, dtype=dtype, endpoint=True)
              for _ in range(size)]
    fold = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    ranks = list(range(size))
    order.shuffle(ranks)
    result = ordered(inputs, ranks, fold, dtype)            # numpy wraps as C does
    assert judge.wrong(result, inputs, op, dtype).size == 0
    off = result.copy()
    off[3] = off[3] ^ np.array(1, dtype)
    assert judge.wrong(off, inputs, op, dtype).tolist() == [3]


def test_64_bit_integers_through_float64_are_caught():
    inputs = [np.array([2 ** 53 + 1], np.int64), np.array([2], np.int64)]
    through = (inputs[0].astype(np.float64) + inputs[1].astype(np.float64)).astype(np.int64)
    assert judge.wrong(through, inputs, "sum", "int64").tolist() == [0]


def test_max_min_propagate_nan_and_take_a_zero_of_either_sign():
    inputs = [np.array([np.nan, 0.0, 1.0], np.float64), np.array([2.0, -0.0, 3.0], np.float64)]
    assert judge.wrong(np.array([np.nan, -0.0, 3.0]), inputs, "max", "float64").size == 0
    assert judge.wrong(np.array([np.nan, 0.0, 3.0]), inputs, "max", "float64").size == 0
    assert judge.wrong(np.array([2.0, 0.0, 3.0]), inputs, "max", "float64").tolist() == [0]
    assert judge.wrong(np.array([np.nan, 0.0, 1.0]), inputs, "min", "float64").size == 0


@pytest.mark.parametrize("dtype", FLOATS)
def test_avg_summed_then_divided_or_divided_then_summed_passes(dtype):
    rng = np.random.default_rng(3)
    inputs = [(rng.standard_normal(128) * 8).astype(dtype) for _ in range(5)]
    size = np.array(5, dtype)
    after = (ordered(inputs, range(5), np.add, dtype) / size).astype(dtype)
    before = ordered([(x / size).astype(dtype) for x in inputs], range(5), np.add, dtype)
    for result in (after, before):
        assert judge.wrong(result, inputs, "avg", NAMES[dtype]).size == 0
    assert judge.wrong(ordered(inputs, range(5), np.add, dtype), inputs, "avg",
                       NAMES[dtype]).size > 64


@pytest.mark.parametrize("profile", C.PROFILES)
@pytest.mark.parametrize("size", [1, 2, 5, 8])
def test_every_case_of_every_profile_is_valid_and_covers_every_dimension(profile, size):
    sweep = C.sweep(size, profile)
    assert {c["dim"] for c in sweep} == set(C.DEFAULT_DIMENSIONS)
    assert all(C.valid(c) for c in sweep)
    assert {c["dtype"] for c in sweep} == set(C.DTYPES)
    assert {c["layout"] for c in sweep} >= {"strided", "transposed", "3d"}
    counts = {c["count"] for c in sweep if c["dim"] == "counts"}
    assert 0 in counts and 1 in counts and size + 1 in counts
    if profile == "full":
        assert {size - 1, size, 127, 2 ** 14 + 1} <= counts
        assert {(4 << 20) // 4 - 1, (4 << 20) // 4, (4 << 20) // 4 + 1} <= counts
        assert {c["values"] for c in sweep} == set(C.VALUES)


@settings(max_examples=60)
@given(count=st.integers(0, 300), layout=st.sampled_from(C.LAYOUTS),
       dtype=st.sampled_from(C.DTYPES))
def test_a_layout_holds_the_contribution_in_c_order(count, layout, dtype):
    c = {**C.BASE, "dim": "layouts", "count": count, "layout": layout, "dtype": dtype}
    flat = C.contribution(c, 1, 0)
    x, base = C.arrays(c, flat)
    assert x.size == count and x.dtype == C.dtype_of(c) and x.shape == C.shape_of(c)
    assert np.ascontiguousarray(x).reshape(-1).tobytes() == flat.tobytes()
    if count > 1 and layout in ("strided", "transposed") and min(x.shape) > 1:
        assert not x.flags.c_contiguous
    assert np.shares_memory(x, base) or count == 0


def test_contributions_depend_on_rank_call_and_kind():
    for v in C.VALUES:
        for d in C.DTYPES:
            for o in C.OPS:
                c = {**C.BASE, "dim": "values", "values": v, "dtype": d, "op": o, "count": 64}
                if not C.valid(c):
                    continue
                a, b = C.contribution(c, 0, 0), C.contribution(c, 1, 0)
                assert a.dtype == C.dtype_of(c) and a.size == 64
                assert a.tobytes() != b.tobytes() and a.tobytes() != C.contribution(c, 0, 1).tobytes()
                assert a.tobytes() == C.contribution(c, 0, 0).tobytes()
    big = {**C.BASE, "values": "big", "dtype": "int64", "count": 100}
    assert (C.contribution(big, 0, 0) > 2 ** 53).all()


def test_parse_ranks():
    assert driver.parse_ranks("1-3,5") == [1, 2, 3, 5]
    assert driver.parse_ranks("2") == [2]
    for bad in ("0", "x", "3-", ""):
        with pytest.raises(ValueError, match="rank counts"):
            driver.parse_ranks(bad)


def test_a_reproducer_is_a_script_with_its_mpiexec_line():
    case = C.sweep(3, "smoke", ["layouts"])[0]
    script = driver.reproducer("some/where.py:fn", 3, case, ["mod"], 30, "mpi", "repro_2.py")
    assert script.startswith("# timeout -k 5 30 mpiexec -n 3 python repro_2.py\n")
    compile(script, "repro_2.py", "exec")
    assert "where.py:fn" in script and "load=['mod'], nan='mpi'" in script


def test_reproducers_are_named_once_per_distinct_case_and_their_scripts_say_so():
    report = driver.Report(["t.py:f"], [2], "smoke", [], "mpi", 60)
    case = C.sweep(2, "smoke", ["values"])[0]
    small = {"ranks": 1, "case": case, "problems": ["x"], "note": "n", "confirmed": True}
    for dim in ("values", "values", "dtypes"):
        report.add("t.py:f", 2, {**case, "dim": dim}, {"verdict": "fail", "problems": ["x"]})
    report.results[0]["smallest"] = dict(small)
    report.results[1]["smallest"] = dict(small)
    report.results[2]["smallest"] = {**small, "ranks": 2}
    report.name_reproducers(30)
    names = [r["smallest"]["name"] for r in report.results]
    assert names == ["repro_1.py", "repro_1.py", "repro_2.py"]
    assert report.results[2]["smallest"]["script"].startswith(
        "# timeout -k 5 30 mpiexec -n 2 python repro_2.py\n")
    assert report.text().count("## repro_") == 2


class FakeJob:
    """A job whose cases pass, but hang from case ``hang_at`` on, or are cut by the time
    limit from case ``cut_at`` on; it counts the cases it was given."""

    def __init__(self, size, hang_at=None, cut_at=None):
        self.size, self.hang_at, self.cut_at, self.ran = size, hang_at, cut_at, 0

    def run(self, target, case, timeout, nan, until, int_overflow="wrap"):
        self.ran += 1
        if self.cut_at is not None and self.ran > self.cut_at:
            return {"verdict": "cut", "problems": [], "seconds": 0}
        if self.hang_at is not None and self.ran > self.hang_at:
            return {"verdict": "hang", "problems": ["no answer"], "seconds": timeout}
        return {"verdict": "pass", "problems": [], "seconds": 0}


def test_a_hang_is_its_rank_counts_verdict_and_ends_it():
    sweep = C.sweep(3, "smoke")
    report = driver.Report(["t"], [2, 3, 4], "smoke", [], "propagate", 60)
    jobs = {2: FakeJob(2), 3: FakeJob(3, hang_at=4), 4: FakeJob(4, cut_at=10)}
    for size, job in jobs.items():
        driver._run_sweep(job, "t", sweep, report, 60, "propagate", 0, None)
    assert [jobs[s].ran for s in (2, 3, 4)] == [len(sweep), 5, 11]
    verdicts = {v["ranks"]: v for v in report.verdicts()}
    assert verdicts[2]["verdict"] == "passed" and verdicts[2]["not_run"] == 0
    assert verdicts[3]["verdict"] == "hangs" and verdicts[3]["case"] == sweep[4]
    assert verdicts[3]["cases"] == 5 and verdicts[3]["not_run"] == len(sweep) - 5
    assert verdicts[4]["verdict"] == "incomplete" and verdicts[4]["not_run"] == len(sweep) - 10
    assert report.unreached == [{"target": "t", "ranks": 4, "cases": len(sweep) - 10,
                                 "why": "time-limit"}]
    text = report.text()
    assert "t: 2 passed, 3 hangs, 4 incomplete" in text and "FAILED" in text
    assert f"hangs on 3 ranks at {sweep[4]['dim']}" in text
    assert f"not reached within --time-limit 60 s: t on 4 ranks, {len(sweep) - 10} cases" in text
    assert not report


def test_a_run_cut_short_with_nothing_failed_is_incomplete_not_passed():
    sweep = C.sweep(2, "smoke")
    report = driver.Report(["t"], [2, 3], "smoke", [], "propagate", 5)
    driver._run_sweep(FakeJob(2, cut_at=3), "t", sweep, report, 60, "propagate", 0, None)
    driver._run_sweep(FakeJob(3, cut_at=0), "t", sweep, report, 60, "propagate", 0, None)
    assert [v["verdict"] for v in report.verdicts()] == ["incomplete", "not reached"]
    assert not report and "INCOMPLETE" in report.text()
    assert report.to_json()["not_run"][1] == {"target": "t", "ranks": 3, "cases": len(sweep),
                                              "why": "time-limit"}


class FakeJobs(dict):
    """Jobs by rank count: a case fails where its count is above 3 on 3 or more ranks and
    hangs on 3 ranks; the rank counts each case ran on are kept."""

    def __init__(self):
        super().__init__()
        self.ran = []

    def __missing__(self, size):
        jobs = self

        class Job:
            def stop(self):
                pass

            def run(self, target, case, timeout, nan, until, int_overflow="wrap"):
                jobs.ran.append(size)
                if size == 3:
                    return {"verdict": "hang", "problems": ["no answer"], "seconds": timeout}
                wrong = size > 3 and case["count"] > 3
                return {"verdict": "fail" if wrong else "pass", "problems": ["wrong"] * wrong,
                        "seconds": 0}
        self[size] = Job()
        return self[size]


def test_shrinking_runs_nothing_where_the_target_hangs():
    case = {**C.BASE, "dim": "counts", "count": 1031}
    failure = {"target": "t", "ranks": 5, "case": case, "problems": ["wrong"]}
    jobs, hung = FakeJobs(), {2}
    small = driver.smallest(jobs, failure, 60, 40, confirm=False, hung=hung)
    assert 2 not in jobs.ran and jobs.ran.count(3) <= 1 and hung == {2, 3}
    assert small["ranks"] == 4 and small["case"]["count"] == 4, small


class RaisingBelow(dict):
    """Jobs by rank count for a target made for 4 ranks: below 4 every case raises (a fail of
    another kind); on 4 or more, counts above 3 get wrong elements."""

    def __missing__(self, size):
        class Job:
            def stop(self):
                pass

            def run(self, target, case, timeout, nan, until, int_overflow="wrap"):
                if size < 4:
                    return {"verdict": "fail", "problems": [
                        "rank 0 call 0: raised ValueError: for exactly 4 ranks"], "seconds": 0}
                wrong = case["count"] > 3
                return {"verdict": "fail" if wrong else "pass",
                        "problems": ["[0] got 1 from (0, 0)"] * wrong, "seconds": 0}
        self[size] = Job()
        return self[size]


def test_shrinking_keeps_the_kind_of_problem():
    """A smaller case that fails another way (raises, where the failure had wrong elements)
    is not the failure made smaller: the shrunk case keeps 4 ranks."""
    case = {**C.BASE, "dim": "counts", "count": 1031}
    failure = {"target": "t", "ranks": 4, "case": case, "problems": ["[0] got 1 from (0, 0)"]}
    small = driver.smallest(RaisingBelow(), failure, 60, 40, confirm=False)
    assert small["ranks"] == 4 and small["case"]["count"] == 4, small


def _fake_openmpi(tmp_path):
    """An mpiexec that says it is Open MPI's (a stand-in: nothing runs)."""
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.11'\n")
    fake.chmod(0o755)
    return str(fake)


def test_jobs_start_with_what_the_mpi_library_needs_unless_mpiexec_is_given(tmp_path,
                                                                         monkeypatch):
    import os

    fake = _fake_openmpi(tmp_path)
    monkeypatch.setenv("MPIEXEC", fake)
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    command, env = driver.default_mpiexec()
    assert command == [fake, "--oversubscribe"]
    assert env["OMPI_MCA_btl"] == "self,sm"
    assert (env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1") == (os.geteuid() == 0)
    monkeypatch.setenv("MPIEXEC", f"{fake} --bind-to none")     # its own arguments kept
    assert driver.default_mpiexec()[0] == [fake, "--oversubscribe", "--bind-to", "none"]
    seen = {}

    class Jobs:
        def __init__(self, mpiexec, load, env):
            seen.update(mpiexec=mpiexec, env=env)

        def job(self, size, spec=None, setting=None):
            return FakeJob(size)

        def stop(self, size=None, spec=None):
            pass

        def close(self):
            pass

    monkeypatch.setattr(driver, "Jobs", Jobs)
    driver.check("t", ranks=[1], profile="smoke", dims=["modes"], shrink=False)
    assert seen == {"mpiexec": [fake, "--oversubscribe", "--bind-to", "none"], "env": env}
    driver.check("t", ranks=[1], profile="smoke", dims=["modes"], shrink=False,
                 mpiexec="srun -p debug")
    assert seen == {"mpiexec": ["srun", "-p", "debug"], "env": {}}


def _nan(bits, dtype=np.float32):
    return np.array(bits, f"u{np.dtype(dtype).itemsize}").view(dtype)


def test_a_disagreement_names_its_elements_each_ranks_bits_and_its_class():
    base = np.array([np.nan, 1.5, 0.0, 2.0, 3.0], np.float32)
    results = [base.copy() for _ in range(3)]
    results[2][0] = _nan(0x7fc00003)
    where, kinds = judge.disagreement(results)
    assert where.tolist() == [0] and kinds.tolist() == ["NaN payload"]
    text = judge.describe_disagreement(results, where, kinds)
    assert text == ("ranks' results differ bitwise at 1 of 5 elements (NaN payload only): "
                    "[0] ranks 0,1 0x7fc00000 (nan), rank 2 0x7fc00003 (nan)")
    results[1][2] = -0.0
    results[0][3] = np.nextafter(np.float32(2), np.float32(3))
    where, kinds = judge.disagreement(results)
    assert where.tolist() == [0, 2, 3]
    assert kinds.tolist() == ["NaN payload", "sign of zero", "numeric"]
    text = judge.describe_disagreement(results, where, kinds, limit=5, ranks=[4, 5, 6])
    assert "(NaN payload at 1, sign of zero at 1, numeric at 1)" in text
    assert "[2] ranks 4,6 0x00000000 (0.0), rank 5 0x80000000 (-0.0)" in text
    assert "[3] rank 4 0x40000001 (2.000000238418579), ranks 5,6 0x40000000 (2.0)" in text
    allowed = np.isnan(np.stack(results)).all(axis=0)       # as --nan mpi has it
    assert judge.disagreement(results, allowed)[0].tolist() == [2, 3]
    halves = [np.array([np.nan], np.float16), _nan([0x7e03], np.float16)]
    assert "rank 1 0x7e03 (nan)" in judge.describe_disagreement(halves,
                                                                 *judge.disagreement(halves))
    ints = [np.array([1, 2], np.int8), np.array([1, 3], np.int8)]
    assert judge.disagreement(ints)[1].tolist() == ["numeric"]


def _saturated(inputs, order=None):
    info = np.iinfo(inputs[0].dtype)
    order = order or range(len(inputs))
    acc = np.zeros(inputs[0].size, np.int64)
    for r in order:
        acc = np.clip(acc + inputs[r], info.min, info.max)
    return acc.astype(inputs[0].dtype)


def test_integer_overflow_is_classified_against_cs_rules():
    """Open MPI's saturating int8 and uint8 sums: the signed one a choice (passes under
    --int-overflow any), the unsigned one a deviation from C under either rule."""
    signed = [np.array([50, 100, -100, 3, 100], np.int8),
              np.array([114, 100, -100, 4, -100], np.int8),
              np.array([1, 1, 1, 1, 100], np.int8)]
    got = _saturated(signed, [2, 0, 1])         # folded in another order than the ranks'
    assert judge.may_overflow(np.stack(signed), "sum").tolist() == [True, True, True, False,
                                                                     True]
    assert judge.wrong(got, signed, "sum", "int8").tolist() == [0, 1, 2, 4]
    assert judge.wrong(got, signed, "sum", "int8", int_overflow="any").size == 0
    seen = judge.integer_arithmetic(got, signed, "sum")
    assert seen == {"overflowing": 4, "wrap": 0, "saturate": 4, "other": 0, "wrong": 0}
    rule = judge.broken_rule(got, signed, [0, 1, 2, 4], "sum", "int8", "propagate")
    assert "of 4 elements whose sum overflows int8 in some order, 4 saturate" in rule
    assert "--int-overflow any accepts" in rule
    mixed = got.copy()
    mixed[4] = 100                              # wraps (never left int8 in its order)
    assert judge.integer_arithmetic(mixed, signed, "sum")["wrap"] == 1
    assert judge.broken_rule(got, signed, [0], "sum", "int8", "propagate", "any") == ""
    off = got.copy()
    off[3] = 9                                  # wrong where nothing overflows: no rule passes
    assert judge.wrong(off, signed, "sum", "int8", int_overflow="any").tolist() == [3]
    assert judge.integer_arithmetic(off, signed, "sum")["wrong"] == 1
    garbage = got.copy()
    garbage[0] = 5
    assert "1 do neither" in judge.broken_rule(garbage, signed, [0], "sum", "int8", "propagate")
    unsigned = [np.array([232, 1, 200], np.uint8), np.array([40, 2, 200], np.uint8)]
    sat = _saturated(unsigned)
    for rule in judge.INT_OVERFLOW_RULES:
        assert judge.wrong(sat, unsigned, "sum", "uint8", int_overflow=rule).tolist() == [0, 2]
        text = judge.broken_rule(sat, unsigned, [0, 2], "sum", "uint8", "propagate", rule)
        assert "2 saturate" in text and "a deviation from C under either" in text
    wrapped = (unsigned[0] + unsigned[1]).astype(np.uint8)
    assert judge.wrong(wrapped, unsigned, "sum", "uint8").size == 0
    big = [np.array([2 ** 62, -3], np.int64)] * 3       # 64-bit: exact, unbounded
    assert judge.may_overflow(np.stack(big), "sum").tolist() == [True, False]
    assert judge.may_overflow(np.stack(big), "prod").tolist() == [True, False]
    top = np.array([2 ** 63 - 1, -9], np.int64)
    assert judge.integer_arithmetic(top, big, "sum")["saturate"] == 1
    assert judge.wrong(top, big, "prod", "int64", int_overflow="any").tolist() == [1]
    assert judge.may_overflow(np.stack([np.array([-128, 0, 2], np.int8)] * 2),
                              "prod").tolist() == [True, False, False]


def test_the_rules_are_checked_before_anything_runs():
    with pytest.raises(ValueError, match="--int-overflow must be one of wrap, any"):
        driver.check("t", ranks=[1], int_overflow="saturate", mpiexec="true")


def test_a_standalone_reproducer_carries_its_data_and_imports_no_pyar():
    from pyar.verify import standalone

    case = {**C.BASE, "dim": "dtypes", "dtype": "uint8", "op": "sum", "count": 5}
    text = standalone.script("mpi", 2, case, problems=["call 0: 5 of 5 elements wrong"])
    compile(text, "repro.py", "exec")
    imports = [line for line in text.splitlines() if line.startswith(("import", "from"))]
    assert imports == ["import base64, importlib, importlib.util, os, sys, time, zlib",
                       "import numpy as np", "from mpi4py import MPI"]
    assert text.startswith("# timeout -k 5 60 mpiexec -n 2 python repro.py\n")
    assert "# pyar verify saw: call 0: 5 of 5 elements wrong" in text
    inputs = [C.contribution(case, r, 0) for r in range(2)]
    assert f"np.array([{', '.join(str(int(v)) for v in inputs[1])}], DTYPE)" in text
    wrapped = (inputs[0] + inputs[1]).astype(np.uint8)
    assert f"EXPECTED = [np.array([{', '.join(str(int(v)) for v in wrapped)}], DTYPE)]" in text
    assert "comm.Allreduce(send, result, OPS[op])" in text
    large = standalone.script("pyar:ring", 3, {**case, "count": 1031, "dtype": "bfloat16",
                                               "layout": "strided", "mode": "out",
                                               "calls": 2, "interleave": True}, nan="mpi")
    compile(large, "repro.py", "exec")
    assert "import pyar     # the target is pyar's own ring" in large
    assert "import ml_dtypes" in large and "unpack('" in large and "base[::2]" in large
    assert "comm.Isend(m, dest=right, tag=tag)" in large and "out_buffer = np.full(" in large
    assert "MPI defines no NaN payload" in large
    expected, tolerance = judge.expectation([np.array([1.0, np.nan, 3e38], np.float32)] * 2,
                                            "sum", "float32")
    assert expected[0] == 2.0 and np.isnan(expected[1]) and tolerance[1] == 0
    assert 0 < tolerance[0] < 1e-6 and tolerance[2] == np.inf      # 6e38 overflows: anything
    expected, tolerance = judge.expectation([np.array([100, 1], np.int8)] * 2, "sum", "int8",
                                            int_overflow="any")
    assert expected.tolist() == [-56, 2] and tolerance.tolist() == [np.inf, 0]


@pytest.mark.parametrize("profile", C.PROFILES)
def test_the_race_cases_are_large_repeated_and_never_in_place(profile):
    races = [c for c in C.sweep(3, profile) if c["dim"] == "races"]
    assert races and all(c["race"] and c["calls"] == 3 for c in races)
    assert all(c["count"] * C.dtype_of(c).itemsize > C.THRESHOLDS[0] for c in races)
    assert max(c["count"] * 4 for c in races) > (256 << 10 if profile == "smoke" else 1 << 20)
    assert not any(c["race"] for c in C.sweep(3, profile) if c["dim"] != "races")
    assert not C.valid({**races[0], "mode": "inplace"})


@pytest.mark.parametrize("profile", C.PROFILES)
def test_the_reproducible_dimension_is_float_sums_and_averages_of_allreduce_only(profile):
    cases = C.sweep(4, profile, ["reproducible"])
    assert cases and all(c["dtype"] in C.FLOATS and c["op"] in ("sum", "avg") for c in cases)
    assert ("float32", "sum") in {(c["dtype"], c["op"]) for c in cases}
    assert "reproducible" not in C.DEFAULT_DIMENSIONS and "reproducible" in C.DIMENSIONS
    assert not C.sweep(4, profile, ["reproducible"], "reduce_scatter")
    if profile != "smoke":
        assert {"random", "special", "halfcancel"} <= {c["values"] for c in cases}
