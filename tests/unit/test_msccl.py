"""MSCCL programs (msccl-tools' algorithm XML) as pyar algorithms: the ring of msccl-tools'
examples moves what pyar's ring moves and gives the reference's result; what pyar cannot
run is a clear error naming the gpu, threadblock and step."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pyar
from pyar.algorithms import msccl

pytestmark = pytest.mark.usefixtures("scratch_registry")

RING = os.path.join(os.path.dirname(__file__), "..", "data", "msccl", "allreduce_ring_4.xml")


def test_the_ring_program_registers_under_its_name():
    assert pyar.load_algorithm(RING) == "allreduce_ring_inplace"
    assert "allreduce_ring_inplace" in pyar.algorithms("allreduce")


@pytest.mark.parametrize("count", [0, 4, 64, 1000])
def test_its_traffic_is_pyar_rings_per_rank(count):
    name = pyar.load_algorithm(RING)
    mine = pyar.simulate(pyar.schedule(name, 4, count), data=False).stats
    ring = pyar.simulate(pyar.schedule("ring", 4, count), data=False).stats
    assert [(s.bytes_sent, s.bytes_received) for s in mine] == \
        [(s.bytes_sent, s.bytes_received) for s in ring]


@pytest.mark.parametrize("count", [1, 5, 8, 37])
def test_its_results_equal_the_reference_on_every_rank(count):
    name = pyar.load_algorithm(RING)
    inputs = [np.arange(count, dtype=np.int64) * (r + 1) + r for r in range(4)]
    outputs = pyar.simulate(pyar.schedule(name, 4, count), inputs).outputs
    for out in outputs:
        assert np.array_equal(out, sum(inputs))


def test_another_rank_count_is_a_clear_error():
    name = pyar.load_algorithm(RING)
    with pytest.raises(ValueError, match="exactly 4 ranks, not 3"):
        pyar.schedule(name, 3, 8).steps(0)


def program(steps_of, ngpus=2, coll="allreduce", nchunks=2, tb='send="{n}" recv="{n}"'):
    """An XML program: ``steps_of(g)`` the <step> elements of gpu g's one threadblock."""
    gpus = "".join(
        f'<gpu id="{g}" i_chunks="{nchunks}" o_chunks="0" s_chunks="0">'
        f'<tb id="0" {tb.format(n=(g + 1) % ngpus)} chan="0">{steps_of(g)}</tb></gpu>'
        for g in range(ngpus))
    return (f'<algo name="t_prog" proto="Simple" nchunksperloop="{nchunks}" ngpus="{ngpus}" '
            f'coll="{coll}" inplace="1">{gpus}</algo>')


def step(i, kind, off=0, cnt=1, dst=None):
    dst = off if dst is None else dst
    return (f'<step s="{i}" type="{kind}" srcbuf="i" srcoff="{off}" dstbuf="i" dstoff="{dst}" '
            f'cnt="{cnt}" depid="-1" deps="-1" hasdep="0"/>')


def load(tmp_path, text):
    path = tmp_path / "p.xml"
    path.write_text(text)
    return pyar.load_algorithm(str(path))


GOOD = program(lambda g: step(0, "s", g) + step(1, "rrc", 1 - g) + step(2, "s", 1 - g)
               + step(3, "r", g))


def test_a_two_rank_program_written_here_runs(tmp_path):
    name = load(tmp_path, GOOD)
    inputs = [np.arange(5.0), np.arange(5.0) * 10]
    for out in pyar.simulate(pyar.schedule(name, 2, 5), inputs).outputs:
        assert np.array_equal(out, inputs[0] + inputs[1])


@pytest.mark.parametrize("text, words", [
    ("<algo name='x'", "not well-formed XML"),
    (program(lambda g: step(0, "re")), "gpu 0 tb 0 step 0: instruction 're' is not supported"),
    (program(lambda g: step(0, "s"), tb='send="5" recv="-1"'),
     "gpu 0 tb 0: send peer 5 is not another gpu in \\[0, 2\\)"),
    (program(lambda g: step(0, "s") if g == 0 else ""),
     "gpu 0 tb 0 step 0: its s has no matching receive on gpu 1"),
    (program(lambda g: step(0, "s", 0, 3)), "gpu 0 tb 0 step 0: chunks \\[0, 3\\) of buffer 'i' "
     "do not fit"),
    (program(lambda g: step(0, "rrc", 0, 1, 1)), "gpu 0 tb 0 step 0: rrc from"),
    (program(lambda g: step(0, "s"), coll="alltoall"), "coll 'alltoall' is not one pyar runs"),
    (program(lambda g: step(0, "r") + step(1, "s")), "cycle: it deadlocks"),
])
def test_what_pyar_cannot_run_is_a_clear_error(tmp_path, text, words):
    with pytest.raises(pyar.ScheduleError, match=words) as e:
        load(tmp_path, text)
    assert isinstance(e.value, ValueError)


def test_a_count_that_does_not_fit_is_a_clear_error(tmp_path):
    moves = program(lambda g: step(0, "s", 1) + step(1, "r", 0), nchunks=2)
    name = load(tmp_path, moves)
    assert pyar.simulate(pyar.schedule(name, 2, 4), [np.ones(4)] * 2).outputs
    with pytest.raises(ValueError, match="gpu 0 tb 0 step 1: receives 1 elements into a chunk "
                                         "of 2 \\(count 3 is not divisible"):
        pyar.schedule(name, 2, 3).steps(0)


def test_load_all_takes_xml_and_modules():
    msccl.load_all([RING])
    assert "allreduce_ring_inplace" in pyar.algorithms()


@pytest.mark.parametrize("command", ["sim", "model", "draw"])
def test_the_cli_loads_a_program(command):
    name = "allreduce_ring_inplace"
    args = {"sim": ["-a", name, "-N", "4", "--count", "16"], "model": ["-a", name, "-N", "4"],
            "draw": [name, "-N", "4", "--count", "8", "--table"]}[command]
    done = subprocess.run([sys.executable, "-m", "pyar", command, "--load", RING, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert name in done.stdout or command == "draw", done.stdout
