# Two commands a reader needs: `make chapter` recomputes the whole chapter, `make test` checks it;
# `make lab` opens the notebooks.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: chapter test bench lab clean

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

# Read the notebooks: JupyterLab from .venv, on loopback only, kernels from .venv first (JUPYTER_PATH comes
# before a user's own kernelspecs, so "python3" is the kernel this environment installed).
lab: $(STAMP)
	JUPYTER_PATH=$(CURDIR)/$(VENV)/share/jupyter $(BIN)/python -m jupyterlab --ServerApp.ip=127.0.0.1 \
		--ServerApp.root_dir=$(CURDIR)/notebooks --MappingKernelManager.default_kernel_name=python3 \
		$(if $(filter 0,$(shell id -u)),--allow-root)

bench: $(STAMP)
	$(BIN)/python -m harness_lib.bench

clean:
	rm -rf $(VENV) build *.egg-info
