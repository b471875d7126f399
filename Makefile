# Two commands a reader needs: `make chapter` recomputes the whole chapter, `make test` checks it;
# `make lab` opens the notebooks (`make lab NOTEBOOKS=bg` or `NOTEBOOKS=hu`: in Bulgarian or Hungarian), `make book`
# builds them into a website, to read without Python (docs/book.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: chapter notebooks test check bench lab book translations clean local mutate

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# The reader's run: copies of the notebooks executed, the report and the translated notebooks (rebuilt from the
# English ones just executed) written to executed/, ignored by git; no tracked file changes. The notebooks run two
# at once on two cores or more; `make chapter HARNESS_CHAPTER_JOBS=1`: one at a time. The Bulgarian and Hungarian
# notebooks are executed in their language when asked, `make chapter LANGUAGES=bg` (or "bg hu"); otherwise they are
# the committed ones. Only a value given on make's command line counts (LANGUAGE and LANG are the shell's locale).
CHAPTER_LANGUAGES := $(if $(filter command line,$(origin LANGUAGES)),$(strip $(LANGUAGES)),)
chapter: $(STAMP)
	HARNESS_CHAPTER_LANGUAGES="$(CHAPTER_LANGUAGES)" $(BIN)/python -m harness_lib chapter --execute

# The maintainer's refresh of the committed reference (docs/developing.md): the same run, then its notebooks,
# reports/ and translated notebooks put over the committed ones; notebook 12's recorded live section kept unless
# the local model ran (`make local` first to record it anew).
notebooks: $(STAMP)
	$(BIN)/python -m harness_lib.chapter.refresh

# Two worker processes more than the cores (pytest-xdist's `-n auto`, as tests/conftest.py defines it, with what stays
# together and what goes first):
# `make test TEST_JOBS=0` runs it all in pytest's own process, as before.
# Bytecode is written and read, Python's default, even where the machine turns writing off (PYTHONDONTWRITEBYTECODE
# set, as on this project's CI): otherwise every process, each campaign child and each kernel, compiles the harness
# and the tests again (make check: about 12 % of its CPU).
# nbval checks the notebooks in every language (notebooks/bg, notebooks/hu: executed in their language). The English
# copies of the timed notebooks (TIMED: tests/test_loaded.py's list, those with a Stop, a kill or a latency, whose
# figures are times judged against the chapter's tolerances) are checked with every core busy (tests/test_loaded.py:
# nbval, three at once beside a spinner per core), which is their nbval run in make test (TIMED_ENGLISH: they ran here
# too, the same comparisons on a lighter load, about 28 s of a worker's time). Their translated copies run the same
# code, in the suite like every other notebook (they were left out while one of 09's times came out of its tolerance
# under the suite's load; they now pass four at once beside three spinners, and in the suite: docs/benchmarks.md).
TEST_JOBS ?= auto
TIMED = 04-five-exits 08-resume 09-cancellation 11-latency 13-subagent 14-libraries
TIMED_ENGLISH = $(foreach n,$(TIMED),notebooks/$(n).ipynb)
NBVAL = --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg -p no:cacheprovider
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_JOBS) tests notebooks $(NBVAL) \
		$(addprefix --ignore-glob=,$(wildcard $(TIMED_ENGLISH)))

# The developer's loop: every test but those marked `slow` (child processes, real sleeps, the browser, the
# notebooks, the campaigns). `make test` runs everything, as CI does: run it before you push.
check: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest tests -m "not slow" -q -p no:cacheprovider

# Mutation testing of the core (docs/mutation.md): mutmut, the `mutate` extra, changes one thing at a time in
# loop, stops, budget, dedupe, policy, state, journal, ledger, lock and reply, and runs each module's own fast
# tests on each change. Not part of `make test`. `make mutate MODULES="stops dedupe"` runs some of them.
MUTATE_STAMP := $(VENV)/.mutate-installed

$(MUTATE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,mutate]'
	touch $@

mutate: $(MUTATE_STAMP)
	$(BIN)/python tests/mutate.py $(MODULES)

# Read the notebooks: JupyterLab from .venv, on loopback only, offline (harness_lib/chapter/lab.py: the news and
# update checks off through lab/overrides.json and the command line), kernels from .venv first.
# `make lab NOTEBOOKS=bg` (or hu) opens the Bulgarian (Hungarian) notebooks, notebooks/bg, with the English one
# folder up. Not LANG or LANGUAGE, the locale variables a shell already sets, and only a value given on make's
# command line counts: a NOTEBOOKS inherited from the environment is ignored. JupyterLab's own menus stay in
# English: there is no Bulgarian language pack, and the Hungarian one on PyPI holds no translated strings.
LAB_LANGUAGES := en bg hu
LAB_NOTEBOOKS := $(if $(filter command line,$(origin NOTEBOOKS)),$(strip $(NOTEBOOKS)),en)
ifneq ($(filter lab,$(MAKECMDGOALS)),)
ifneq ($(filter-out $(LAB_LANGUAGES),$(LAB_NOTEBOOKS))$(filter-out 1,$(words $(LAB_NOTEBOOKS))),)
$(error NOTEBOOKS=$(LAB_NOTEBOOKS): choose one of $(LAB_LANGUAGES))
endif
endif
lab: $(STAMP)
	$(BIN)/python -m harness_lib.chapter.lab $(LAB_NOTEBOOKS)

# The book (docs/book.md): the committed notebooks, never executed, as a website in English, Bulgarian and Hungarian,
# built by Sphinx (myst-nb, sphinx-book-theme: the `book` extra, installed once, a stamp as `make local` has) into
# _book/ (ignored by git; the committed files are staged and changed there, never in place). Its last line names the
# index.html to open; _book/html is the whole site, for any static host. Offline, like everything else here.
BOOK_STAMP := $(VENV)/.book-installed

$(BOOK_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,book]'
	touch $@

book: $(BOOK_STAMP)
	$(BIN)/python -m book

# The notebooks in Bulgarian and Hungarian (docs/translating.md): the English notebooks' markdown and their built
# cells' comments into locale/*/LC_MESSAGES/notebooks.po, the chapter layer's messages into chapter.po (a changed
# message's translation marked fuzzy), then notebooks/bg and notebooks/hu rebuilt from the English notebooks and the
# translations, and executed in their language (those whose code, prose or chapter.po changed).
translations: $(STAMP)
	$(BIN)/python -m harness_lib.chapter.translations

# The peer comparison (benchmarks/RESULTS.md); the peers come with the bench extra. The provider's own
# figures: python -m benchmarks.provider
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m benchmarks --write

# Section 12 with a real local model: the `local` extra. llama-cpp-python builds from source (~4 minutes on two
# cores), once: pip keeps the wheel in its cache (`pip cache remove llama_cpp_python` forces a rebuild).
# A portable build, not -march=native: ggml's x86-64-v3 baseline (AVX2, FMA, F16C, BMI2) without AVX-512,
# stepped down on a CPU without AVX2 or AVX. A native build crashed in decode on an AVX-512 machine (docs/local-model.md).
CPU_FLAGS := $(shell cat /proc/cpuinfo 2>/dev/null | grep -m1 '^flags')
# Only what the server loads: libllama and libggml (local-build.cmake says why); ggml's build uses ccache or
# sccache by itself when one is on the PATH.
LOCAL_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF \
	-DCMAKE_PROJECT_INCLUDE='$(CURDIR)/local-build.cmake' \
	$(if $(CPU_FLAGS),$(if $(filter avx2,$(CPU_FLAGS)),,-DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_BMI2=OFF)) \
	$(if $(CPU_FLAGS),$(if $(filter avx,$(CPU_FLAGS)),,-DGGML_AVX=OFF -DGGML_F16C=OFF))
LOCAL_STAMP := $(VENV)/.local-installed

local: $(LOCAL_STAMP)

$(LOCAL_STAMP): $(STAMP)
	CMAKE_ARGS="$(strip $(LOCAL_CMAKE_ARGS))" CMAKE_BUILD_PARALLEL_LEVEL=$${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
		nice -n 19 $(BIN)/python -m pip install --quiet -e '.[test,local]'
	$(BIN)/python -c "import sys; from harness_lib import local; sys.exit(local.missing())"
	$(BIN)/python -c "from harness_lib import local; print('local model ready:', local.verify(local.model_path()))"
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info _book
