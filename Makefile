# Two commands a reader needs: `make chapter` recomputes the whole chapter, `make test` checks it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: chapter test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

chapter: $(STAMP)
	$(BIN)/python -m harness_lib chapter --execute

test: $(STAMP)
	$(BIN)/python -m pytest tests notebooks --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg -p no:cacheprovider

# The peer comparison (benchmarks/RESULTS.md); the peers come with the bench extra. The provider's own
# figures: python -m harness_lib.bench
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m benchmarks --write

clean:
	rm -rf $(VENV) build *.egg-info
