# The two README commands: `make run` (main job) and `make test` (test suite).
# Each creates .venv and installs the package with every extra on first use.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: run test test-slow test-portable verify bench install clean

$(STAMP): pyproject.toml constraints/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints/cpu.txt -e '.[all]'
	touch $(STAMP)

# verl's published package, without its dependencies (its pins clash with the trl extra's transformers), in a
# folder off sys.path: the parity tests load verl's own loss and rollout-correction code from it (tests/_peer_verl.py)
VERL_VERSION = 0.9.1
VERL_PEER    = $(VENV)/peers/verl-$(VERL_VERSION)
VERL_STAMP   = $(VERL_PEER)/.installed

$(VERL_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps --upgrade --target $(VERL_PEER) verl==$(VERL_VERSION)
	touch $(VERL_STAMP)

install: $(STAMP) $(VERL_STAMP)

run: $(STAMP)
	$(PY) -m figures

test: $(STAMP) $(VERL_STAMP)
	$(PY) -m pytest -q -m "not slow"

# Float-sensitive tests rerun on other CPUs' kernels (docs/portability.md): the torch ones under every
# ATEN_CPU_CAPABILITY this machine supports (default, avx2, avx512: torch can only go down from its own),
# the Numba ones with NUMBA_CPU_NAME=generic (no host-specific instructions, no FMA contraction) and NumPy on its
# baseline code (NPY_DISABLE_CPU_FEATURES: every run-time dispatched SIMD target off, e.g. its AVX-512 np.exp).
TORCH_FLOAT_TESTS = tests/test_integration_trl.py tests/test_integration_verl.py tests/test_loss_parity.py \
	tests/test_peer_corrections.py tests/test_peer_losses.py tests/test_peer_metrics.py tests/test_token_level.py \
	tests/test_estimators.py tests/faults/test_policy_loss_faults.py tests/faults/test_policy_loss_overflow.py \
	tests/faults/test_torch_validation.py tests/faults/test_weight_cap_dtypes.py \
	tests/test_peer_parity_verl.py tests/test_peer_parity_trl.py tests/test_bridge_t2_portable.py
NUMBA_FLOAT_TESTS = tests/test_core_contracts.py tests/test_estimators.py tests/test_token_level.py \
	tests/test_montecarlo.py tests/test_montecarlo_exact.py tests/test_montecarlo_scaling.py \
	tests/test_bench_training.py tests/test_training.py tests/test_kernel_identity.py tests/test_kernel_row_maps.py \
	tests/test_c6_overlap.py tests/test_instances_portable.py tests/test_training_vexp.py
CAPABILITIES = $(shell $(PY) -c "import torch; c = torch.backends.cpu.get_cpu_capability().lower(); \
	print({'avx512': 'default avx2 avx512', 'avx2': 'default avx2'}.get(c, 'default' if c == 'default' else 'default ' + c))" 2>/dev/null || echo default)

NUMPY_TARGETS = $(shell $(PY) -c "from numpy._core._multiarray_umath import __cpu_dispatch__ as d, __cpu_features__ as f; \
	print(' '.join(t for t in d if f.get(t)))" 2>/dev/null)

test-portable: $(STAMP) $(VERL_STAMP)
	@for cap in $(CAPABILITIES); do \
	  got=$$(ATEN_CPU_CAPABILITY=$$cap $(PY) -c "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"); \
	  [ "$$got" = "$$cap" ] || { echo "ATEN_CPU_CAPABILITY=$$cap not honoured (torch runs $$got)"; exit 1; }; \
	  echo "== torch float tests, ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap $(PY) -m pytest -q -m "not slow" -p no:cacheprovider $(TORCH_FLOAT_TESTS) || exit 1; \
	done
	@echo "== Numba float tests, NUMBA_CPU_NAME=generic, NumPy without its dispatched targets ($(NUMPY_TARGETS))"
	NUMBA_CPU_NAME=generic NPY_DISABLE_CPU_FEATURES="$(NUMPY_TARGETS)" $(PY) -m pytest -q -m "not slow" -p no:cacheprovider $(NUMBA_FLOAT_TESTS)

# The checks that cannot move a shown number on one machine (issue 59; figures/verify.py): the LM protocol's seeds
# re-made on other ATen/MKL kernel paths, protocol v6 cells under NUMBA_CPU_NAME=generic. After `make run`; run it
# after changing the CPU, torch, Numba or NumPy. Stamps figures/history/verify.json, quoted in the report's head.
verify: $(STAMP)
	$(PY) -m figures.verify

test-slow: $(STAMP) $(VERL_STAMP)
	$(PY) -m pytest -q -m slow || [ $$? -eq 5 ]  # exit 5: no test selected

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Mutation testing of the core (issue 19; mutation/README.md). Too slow for CI: one file takes
# minutes to an hour. `make mutate FILES=simulate/delays.py` runs one file; FILES empty = all.
# Two independent operator sets (issue 55): cosmic-ray (mutation/run.py), then mutmut 3
# (mutation/mutmut_run.py; MUTMUT=0 leaves it out); fails when either scores a file below 95 %.
.PHONY: mutate
FILES ?=
MUTMUT ?= 1
mutate: $(STAMP)
	$(PY) -c "import cosmic_ray, mutmut" 2>/dev/null || $(PY) -m pip install -q -c constraints/cpu.txt -e '.[mutation]'
	rc=0; $(PY) mutation/run.py $(FILES) || rc=1; \
	if [ "$(MUTMUT)" != 0 ]; then $(PY) mutation/mutmut_run.py $(FILES) || rc=1; fi; exit $$rc
