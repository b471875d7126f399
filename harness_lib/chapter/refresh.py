"""``make notebooks``: the maintainer's refresh of what the project commits as the reference.

    python -m harness_lib.chapter.refresh          # every step
    python -m harness_lib.chapter.refresh --live   # notebook 12 may use LLM_BASE_URL, LLM_MODEL, LLM_API_KEY

``make chapter`` is the reader's: it executes copies of the notebooks and writes only to ``executed/`` (ignored by
git). This is the one command that rewrites the committed notebooks, and it does so the same way: every notebook
executed in a copy, the report written and the translated notebooks built there, and only once all of that
succeeded, each changed file put over the committed one (``notebooks/``, ``notebooks/bg``, ``notebooks/hu``,
``reports/``). Stopped before (Ctrl-C, a failing notebook, a full disk), it changes nothing. Notebook 12's live
section is the record of the local model's last run: kept as it was unless the model ran in this refresh (the
`local` extra installed, ``make local``).

Each step is one entry of ``STEPS``, run in order: a later build of committed files (notebooks generated from
others) is a step added there, so that ``make notebooks`` stays the one command.
"""

from __future__ import annotations

import argparse
import os
import sys


def chapter() -> int:
    """The notebooks executed, reports/ and the translated notebooks: ``report.main`` on the committed ones."""
    from .report import main

    return main(execute=True, reference=True)


def exercises() -> int:
    """The exercise notebooks made again from the section notebooks just refreshed: written, executed, translated
    (``harness_lib.chapter.exercises``)."""
    from .exercises import main

    return main(["--again"])   # the translated ones too: what the library prints may have changed


STEPS = {"the notebooks, the report and the translations": chapter, "the exercise notebooks": exercises}
SEAM = ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY")   # a reader's server: the chapter is the chapter unless --live


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness_lib.chapter.refresh",
                                     description="Refresh the committed notebooks and report (the maintainer's "
                                                 "`make notebooks`; docs/developing.md).")
    parser.add_argument("--live", action="store_true", help="let notebook 12 use LLM_BASE_URL, LLM_MODEL and "
                        "LLM_API_KEY (otherwise they are ignored)")
    args = parser.parse_args(argv)
    if not args.live:
        for name in SEAM:
            os.environ.pop(name, None)
    for what, step in STEPS.items():
        try:
            code = step()
        except KeyboardInterrupt:
            print(f"stopped by Ctrl-C during {what}: the committed files are rewritten all together once every "
                  "notebook has run, or not at all (`git status` says which)", file=sys.stderr)
            return 130
        except OSError as e:   # a full disk, a folder that cannot be written, the notebooks not here
            where = f" {e.filename}" if e.filename else ""
            print(f"error: {what}: cannot use{where}: {e.strerror or e}", file=sys.stderr)
            return 2
        if code:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
