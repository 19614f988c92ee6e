# The two commands of the README: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo design-demo test test-slow fuzz bench bench-scale bench-failures bench-memory \
        bench-collectives bench-incidence bench-coldstart bench-soak bench-fidelity bench-dynamic clean \
        docs docs-serve docs-outputs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,docs]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fabricjax analyze scenarios/quickstart.yaml

# the design search on a bundled 4,096-GPU space: the cheapest fabric that meets the target
design-demo: $(STAMP)
	$(BIN)/fabricjax design scenarios/design-demo.yaml --json design-demo.json --plot design-demo-plots

# worksteal: a worker that runs out of tests takes queued ones from the other, so the
# suite does not wait on one worker's last long tests
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n auto --maxprocesses=4 --dist worksteal

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# the long fuzz run of the README (10,000 generated scenario files through the real command)
fuzz: $(STAMP)
	FABRICJAX_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest -q -m slow tests/test_fuzz.py -k long

bench: $(STAMP)
	$(BIN)/python bench/bench_foundation.py

# the scale suite: 1k to 131k GPUs, every policy, one table (about 30 minutes on 2 cores)
bench-scale: $(STAMP)
	$(BIN)/python bench/bench_scale.py | tee bench/scale_last_run.log

# fabricjax's FCTs beside htsim's on the calibration cases (committed htsim results;
# bench/fidelity/HTSIM.md says how they were made)
bench-fidelity: $(STAMP)
	$(BIN)/python bench/fidelity/compare.py | tee bench/fidelity/last_run.log

# the dynamic level: its targets as whole runs beside the static level and htsim's wall times
# (each run stopped at 300 s; about 40 minutes on 2 cores), then skipping steady states against
# stepping through the whole phase (the quickstart's permutation; about 5 minutes)
bench-dynamic: $(STAMP)
	$(BIN)/python bench/bench_dynamic.py | tee bench/dynamic_last_run.log
	$(BIN)/python bench/bench_skip.py | tee bench/skip_last_run.log

bench-failures: $(STAMP)
	$(BIN)/python bench/bench_failures.py

bench-memory: $(STAMP)
	$(BIN)/python bench/memory_calibration.py | tee bench/memory_last_run.log

# progressive completion vs the numpy event-driven reference, all-to-all classes vs
# flow by flow (about 90 s; writes bench/collectives_last_run.log)
bench-collectives: $(STAMP)
	$(BIN)/python bench/bench_collectives.py

# link loads on stored paths, segment_sum against the BCOO incidence matrix
bench-incidence: $(STAMP)
	$(BIN)/python bench/bench_incidence.py

# a one-off question from the shell: cold, warm (stored executables) and jit-only warm, with
# import, trace, lower, compile, load and run apart (writes bench/coldstart_last_run.log)
bench-coldstart: $(STAMP)
	$(BIN)/python bench/bench_coldstart.py | tee bench/coldstart_last_run.log

# a 1,000-point sweep, resident memory every 100 points (a few minutes; writes
# bench/soak_last_run.log)
bench-soak: $(STAMP)
	$(BIN)/python bench/bench_soak.py

# The docs site (docs/, mkdocs.yml): built strict, so a broken link, anchor or include fails
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

# every command output the docs and README show, rerun (a few minutes), and the generated
# reference pages (scenario file, CLI)
docs-outputs: $(STAMP)
	$(BIN)/python docs/generate.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis site
