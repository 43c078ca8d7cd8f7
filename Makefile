# archplace: `make demo` and `make test` set up .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-slow lint docs bench check-pins schemas lock clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/archplace search --model gpt2-xl --space tiny --devices 1024 --global-batch 4096 --out results/demo.json

# The suite without the tests marked slow, on two workers (under 8 minutes on 2 cores); CI also
# runs test-slow: on two workers, then the tests marked serial (the interrupt tests time how fast
# processes end) alone.
test: $(STAMP)
	$(BIN)/pytest -m "not slow" -n 2

test-slow: $(STAMP)
	$(BIN)/pytest -m "slow and not serial" -n 2
	$(BIN)/pytest -m "slow and serial"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy

# The documentation site (docs/, mkdocs.yml) into site/, warnings as errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

# Fails when a package installed in .venv is not pinned (or pinned at another version).
check-pins: $(STAMP)
	$(BIN)/python tools/check_pins.py constraints.txt

# Rewrite the generated parts of the JSON Schemas (the plan object, from the plan's declared
# fields); tests/test_grid_derived.py fails while they are stale.
schemas: $(STAMP)
	$(BIN)/python tools/generate_schemas.py || true

# Re-resolve every dependency from pyproject.toml's ranges (all extras) in a throw-away
# venv and rewrite constraints.txt with exact pins of what got installed.  torch stays at
# the CPU build 2.13.0: any other release pulls gigabytes of CUDA packages.
LOCK_VENV := .lock-venv
TORCH_PIN := torch==2.13.0
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	echo '$(TORCH_PIN)' > $(LOCK_VENV)/torch.txt
	$(LOCK_VENV)/bin/pip install --quiet -c $(LOCK_VENV)/torch.txt -e '.[dev,cluster]'
	{ echo '# Every package `pip install -c constraints.txt -e ".[dev,cluster]"` installs, pinned.'; \
	  echo '# Written by `make lock` (re-resolves pyproject.toml'"'"'s ranges); do not edit by hand.'; \
	  echo '# torch is the CPU build 2.13.0: the tracing was tested against it, and any other'; \
	  echo '# release pulls gigabytes of CUDA packages.'; \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable | grep -v '^pip==' | sed 's/+cpu$$//' | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) results site .pytest_cache .mypy_cache .ruff_cache
