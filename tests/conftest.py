"""Shared fixtures: one scripted provider per test module, in a background thread, and a fresh one per
test for a test that injects faults (``faulty``): the module's provider refuses faults, so a fault one
test injected and did not spend can never answer the next test's request.

The reader's endpoint seam (LLM_BASE_URL, LLM_MODEL, LLM_API_KEY) is cleared before anything runs, the
notebooks' kernels included (they inherit this environment): the tests check the chapter, not a server
the reader happens to have configured. Tests of the seam set the variables themselves (monkeypatch)."""

import os
from pathlib import Path

import jupyter_client.provisioning.local_provisioner as provisioner
import pytest

from harness_lib.scripted import ScriptedProvider

for _name in ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY"):
    os.environ.pop(_name, None)
os.environ.pop("HARNESS_CHAPTER_COLLECT", None)  # `make chapter`'s, for its own kernels: never the tests' notebooks


class SharedProvider(ScriptedProvider):
    """The module's provider: shared by every test of a module, so it takes no faults."""

    def inject(self, *faults: str) -> ScriptedProvider:
        raise RuntimeError("this provider is shared by the whole test module: inject faults into the `faulty` "
                           "fixture, a provider of the test's own")


@pytest.fixture(scope="module")
def provider():
    with SharedProvider() as p:
        yield p


@pytest.fixture
def faulty():
    """A provider of this test's own, for injecting faults."""
    with ScriptedProvider() as p:
        yield p


@pytest.fixture(scope="module")
def url(provider):
    return provider.base_url


# -- make test on every core ---------------------------------------------------------------------------------
# `make test` runs the suite in two worker processes more than the cores (pytest-xdist, `-n auto`; see
# pytest_xdist_auto_num_workers below). The unit of work a worker takes is a
# file: a notebook's nbval cells share one kernel and run in order, and a test file's module-scoped fixtures
# (the crash and operator campaigns, JupyterLab) are set up once. The files in SPREAD are the exception: each of
# their tests is a unit of its own (test_parameters: one slow, independent test per notebook, in a kernel of its
# own; test_notebooks: a few slow tests, each with kernels of its own; test_checks: every check on its reference and
# on each written-out mistake, a few seconds each, a hundred of them).
# The heaviest units go first, so that the workers end together instead of one waiting on a long test taken
# last: HEAVIEST lists them, most first, by what each took in a CI run (`PYTEST_ADDOPTS=--durations=60 make
# test`, docs/benchmarks.md); the rest keep their order. Only the order in which the workers take the tests
# changes: `make check`, and `make test TEST_JOBS=0`, run them in file order.
SPREAD = ("tests/test_parameters.py", "tests/test_notebooks.py", "tests/test_checks.py")
HEAVIEST = (
    "tests/test_operator.py",
    "tests/test_browser.py",
    "tests/test_parameters.py::test_every_cell_again_alone_then_every_parameter_at_its_edges_and_past_them[12-",
    "tests/test_local_model.py",
    "tests/test_parameters.py::test_every_cell_again_alone_then_every_parameter_at_its_edges_and_past_them[09-",
    "tests/test_executed.py",
    "tests/test_loaded.py",
    "tests/test_crash.py",
    "notebooks/12-",
    "tests/test_sliders.py",
    "tests/test_parameters.py::test_every_cell_again_alone_then_every_parameter_at_its_edges_and_past_them",
    "tests/test_reader_params.py",
    "tests/test_kernel_stop.py",
    "tests/test_book.py",
    "tests/test_figures.py",
    "tests/test_packaging.py",
    "tests/test_types.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """What `-n auto` means here: two workers more than the cores this process may use. Many tests spend their time
    waiting (09's scans, 11's latencies, the campaigns' races, a kernel starting, the local model's one thread), so
    with a worker a core, a core idles while its worker waits. One worker takes the tests that wait most (WAITING,
    below), and one more than the cores computes beside the others meanwhile (two cores, CI's way, the same tree:
    542 s of pytest with three workers, the cores idle 128 s; 496 s with four, idle 43 s, the CPU the same 940 s;
    before the waiting tests had a worker of their own, a fourth worker had cost more than it saved;
    docs/benchmarks.md). PYTEST_XDIST_AUTO_NUM_WORKERS, when set, is xdist's to follow."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 2


# The units that mostly wait (for a scan, a latency, a race, a child process): on the cores' CPU, a few seconds for a
# minute of a worker's time (each alone: the fresh clone's three `make chapter` runs 93 s, 69 s of CPU and the cores
# idle 113 s; 09's reader session 66 s, 6 s of CPU; the operator campaign 38 s, 25 s of CPU; the conformance tests
# 44 s of a worker, 2 s of CPU). One worker takes them one after another while the others keep the two cores busy:
# taken as they came, two of them waited side by side while a third worker alone computed.
WAITING = (
    "tests/test_operator.py",
    "tests/test_executed.py",
    "tests/test_parameters.py::test_every_cell_again_alone_then_every_parameter_at_its_edges_and_past_them[09-",
    "tests/test_conformance.py",
)


def _waits(unit: str) -> bool:
    return unit.startswith(WAITING)


def _unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return nodeid if path in SPREAD else path


def _rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(HEAVIEST) if nodeid.startswith(prefix)), len(HEAVIEST))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist, pytest would refuse it as unknown
def pytest_xdist_make_scheduler(config, log):
    """The controller's: units of work as above, taken in the order the workers collected them. Only for xdist's
    default distribution (what `-n` alone gives): a `--dist` asked for on the command line is xdist's to do."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            """The first worker takes the units that mostly wait (WAITING) while any is left, the others any other
            unit while one is left; then each takes the next unit, whatever it is."""
            waits = getattr(node.gateway, "id", None) == "gw0"
            pick = next((scope for scope in self.workqueue if _waits(scope) == waits), None)
            if pick is not None:
                self.workqueue.move_to_end(pick, last=False)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # xdist's default puts the units with the most tests first
    return ByFile(config, log)


def pytest_collection_modifyitems(config, items):
    """A worker's (it collects, the controller does not): the heaviest first, each file's tests in its order."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: _rank(item.nodeid))


# -- nbval's kernels: the local model switched off ----------------------------------------------------------
# nbval runs notebook 12 in three languages (notebooks/, notebooks/bg, notebooks/hu). Each would run the local
# model's six tasks (about 20 s of CPU a time) to print what nbval does not compare (NBVAL_IGNORE_OUTPUT: a live
# run's times and answers are the machine's). The reader session of tests/test_parameters.py runs notebook 12 whole
# with the model (Run All, then LOCAL_MAX_TURNS at both ends; under HARNESS_REQUIRE_LOCAL=1 it fails if the model did
# not run), and tests/test_local_model.py runs the six tasks and checks what they did. So a kernel started in a
# folder of notebooks/ (nbval's: its kernels start in the notebook's folder) has HARNESS_LOCAL_MODEL=off: notebook
# 12's live section says in one line that the model was switched off. (A variable harness_lib reads when a cell
# asks, not at an import: the kernel is still forked warm, see PER_KERNEL.)
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _model_off_in_notebooks(launch):
    def launch_kernel(cmd, *args, env=None, cwd=None, **kw):
        if cwd is not None and Path(cwd).resolve().is_relative_to(NOTEBOOKS):
            env = {**(os.environ if env is None else env), "HARNESS_LOCAL_MODEL": "off"}
        return launch(cmd, *args, env=env, cwd=cwd, **kw)
    return launch_kernel


# -- the tests' kernels, forked warm -------------------------------------------------------------------------
# A kernel this process starts for a notebook (nbval, nbclient) is forked from a server that has imported
# IPython, pandas and matplotlib once, not started afresh (tests/warm_kernels.py says what differs and where fresh
# kernels are kept). HARNESS_TEST_WARM_KERNELS=0: every kernel fresh.
_warm_kernels = _unwrapped = None


def pytest_configure(config):
    global _warm_kernels, _unwrapped
    import warm_kernels
    if warm_kernels.enabled():
        warm_kernels.PER_KERNEL += ("HARNESS_LOCAL_MODEL",)
        _warm_kernels = warm_kernels.WarmKernels(dict(os.environ))
        _warm_kernels.install()
    _unwrapped = provisioner.launch_kernel
    provisioner.launch_kernel = _model_off_in_notebooks(_unwrapped)


def pytest_unconfigure(config):
    global _warm_kernels
    if _unwrapped is not None:
        provisioner.launch_kernel = _unwrapped
    if _warm_kernels is not None:
        _warm_kernels.close()
        _warm_kernels = None
