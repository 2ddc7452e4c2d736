# pyar: `make run` (the quick benchmark on 4 ranks) and `make test` (everything) set
# themselves up on a fresh machine with only python3 >= 3.10 present.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
MPIEXEC  ?= $(VENV)/bin/mpiexec
NP       ?= 4
BENCH_OUT ?= bench-allreduce
# Bound every MPI job: a wrong schedule must fail, never hang.
TIMEOUT  ?= timeout -k 10 300

.PHONY: run test test-mpi bench bench-kernels examples clean

$(VENV)/.installed: setup.cfg pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot]'
	touch $@

# Compile the Numba kernels into their cache in one process, before any mpiexec (ranks then
# only load them), and anew whenever kernels/ changes.
$(VENV)/.kernels: $(VENV)/.installed $(wildcard kernels/*.py)
	$(PY) -m pyar.kernels --fresh
	touch $@

# The quick benchmark: every allreduce algorithm and auto against MPI_Allreduce, 8 B - 64 MiB.
run: $(VENV)/.kernels
	$(TIMEOUT) $(MPIEXEC) -n $(NP) $(PY) -m mpi4py -m pyar bench -b 8 -e 64M -f 2 -a all,auto \
	  --json $(BENCH_OUT).json --plot $(BENCH_OUT).png

test: $(VENV)/.kernels
	$(PY) -m pytest tests

# The MPI tests alone, at one rank count: make test-mpi NP=3
test-mpi: $(VENV)/.kernels
	$(TIMEOUT) $(MPIEXEC) -n $(NP) $(PY) -m pytest tests/mpi -q --capture=sys

bench: run

# GB/s of the host reduction kernels beside numpy's, per op and dtype
bench-kernels: $(VENV)/.kernels
	$(PY) -m pyar.kernels.bench

# Each example runs as its first line says (# mpiexec -n N python -m mpi4py examples/...);
# -m mpi4py aborts the whole job when one rank raises, instead of leaving the others waiting.
examples: $(VENV)/.kernels
	@set -e; for f in examples/*.py; do \
	  n=$$(sed -n 's/^# *mpiexec -n \([0-9][0-9]*\) .*/\1/p' $$f | head -n 1); \
	  echo "== $$f on $$n ranks"; \
	  $(TIMEOUT) $(MPIEXEC) -n $$n $(PY) -m mpi4py $$f; \
	done

clean:
	rm -rf $(VENV) *.egg-info build dist .hypothesis
