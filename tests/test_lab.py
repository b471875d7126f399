"""`make lab`'s command line (harness_lib/chapter/lab.py): the notebooks it opens, said in one line, and JupyterLab
kept offline by its own settings. The browser test (tests/test_browser.py) starts JupyterLab this way and checks
that no news prompt shows and no request leaves 127.0.0.1."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness_lib.chapter import lab

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path) -> Path:
    (tmp_path / "notebooks" / "bg").mkdir(parents=True)
    (tmp_path / "notebooks" / "01-loop.ipynb").write_text("{}")
    shutil.copytree(ROOT / "lab", tmp_path / "lab")
    return tmp_path


def test_the_news_and_update_checks_are_off_in_jupyterlabs_own_settings(tmp_path):
    project = _project(tmp_path)
    root, line = lab.opens(project)
    argv = lab.command(root, "en", project)
    assert argv[:3] == [sys.executable, "-m", "jupyterlab"]
    assert "--ServerApp.ip=127.0.0.1" in argv and f"--ServerApp.root_dir={(project / 'notebooks').resolve()}" in argv
    for option in ("--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                   "--LabApp.extension_manager=readonly", f"--LabApp.app_settings_dir={(project / 'lab').resolve()}"):
        assert option in argv, option
    assert not [a for a in argv if "default_url" in a]
    # the defaults JupyterLab reads from app_settings_dir: "Never" answers the news prompt before it is asked
    overrides = json.loads((ROOT / "lab" / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}
    assert "--LabApp.default_url=/lab/tree/bg" in lab.command(root, "bg", project)
    assert lab.command(root, "hu", project, options=["--no-browser"])[-1] == "--no-browser"


@pytest.mark.slow
def test_the_settings_jupyterlab_is_given_are_ones_it_knows():
    """A misspelt trait on JupyterLab's command line is a warning it prints and ignores: the settings would be on
    in silence. `--help-all` lists every trait it knows."""
    known = subprocess.run([sys.executable, "-m", "jupyterlab", "--help-all"], capture_output=True, text=True,
                           timeout=120).stdout
    for option in lab.OFFLINE:
        assert option.split("=")[0] in known, option


def test_a_wrong_language_or_folder_is_one_line(tmp_path, monkeypatch, capsys):
    project = _project(tmp_path)
    with pytest.raises(lab.LabError, match="'de': choose one of en, bg, hu"):
        lab.command(project / "notebooks", "de", project)
    (project / "lab" / "overrides.json").unlink()
    with pytest.raises(lab.LabError, match="overrides.json is missing: it turns JupyterLab's news"):
        lab.command(project / "notebooks", "en", project)
    monkeypatch.chdir(tmp_path / "notebooks")   # not the project's folder: no notebooks/ here
    assert lab.main(["en"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: no notebooks in ") and len(err.splitlines()) == 1


def test_jupyter_path_puts_this_environments_kernels_first(monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", "/elsewhere")
    assert lab.environment()["JUPYTER_PATH"] == f"{Path(sys.prefix) / 'share' / 'jupyter'}:/elsewhere"
    monkeypatch.delenv("JUPYTER_PATH")
    assert lab.environment()["JUPYTER_PATH"] == str(Path(sys.prefix) / "share" / "jupyter")
