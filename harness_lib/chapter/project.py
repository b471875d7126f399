"""The project as a check finds it and leaves it: ``data/`` as the package ships it, the notebook's folder as it was.

The library's answers and every case of a reader's piece copy the chapter's workspace from ``data/``; a check run on
other data would compare nothing the chapter says. So:

* ``damaged()``, before a check: a line when a file ``data/SHA256SUMS`` lists is missing or not the one it lists
  (the reader's own cell deleted it, say), else None; the check then gives that line and no verdict;
* ``Watch()``, made as a check starts: ``changed(case)`` after each case, a line when the piece changed ``data/``
  (the check stops there: the next answers would be computed on the changed data); ``notes()`` at the end, a line
  when the notebook's folder (the kernel's working folder) gained, lost or changed a file. A piece runs in a scratch
  folder of its own (``sandbox``), so only a path it was not given reaches either.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..resources import _root
from .language import N_, _
from .plain import cut

# How the data is put back: in the project's folder (a clone), or by installing the package again
FIX = {"data": N_("restore it (`git checkout -- data` in the project's folder)"),
       "harness_lib/data": N_("install harness-lib again")}

MANIFEST = "SHA256SUMS"
_verified: list = []   # [the data folder's stat listing last found intact]


def _listing(root: Path, recursive: bool) -> dict[str, tuple]:
    """{path below ``root``: (size, modification time, change time, inode, folder?)}: a file rewritten and its
    modification time put back still changes its change time, which no call sets; hidden names and notebooks are
    left out of the notebook's folder (JupyterLab saves them, and its checkpoints, while a check runs), and a folder
    is its name and inode only (its times change with what is saved in it: another notebook, in ``bg/``)."""
    found: dict[str, tuple] = {}
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for entry in entries:
        if not recursive and (entry.name.startswith(".") or entry.name.endswith(".ipynb")):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        folder = entry.is_dir(follow_symlinks=False)
        found[entry.name] = ((0, 0, 0, info.st_ino, True) if folder else
                             (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, False))
        if folder and recursive:
            found.update({f"{entry.name}/{k}": v for k, v in _listing(Path(entry.path), True).items()})
    return found


def damaged() -> str | None:
    """A line saying what of ``data/`` is not as shipped, and how to restore it; None when all is."""
    try:
        root, named, _fix = _root()
    except RuntimeError as error:
        return str(error)
    fix = _(FIX.get(named, FIX["data"]))
    listing = _listing(root, True)
    if _verified and _verified[0] == listing:
        return None
    try:
        lines = (root / MANIFEST).read_text(encoding="utf-8").splitlines()
    except OSError:
        return _("{folder}/{manifest} is missing, so the check cannot tell whether the chapter's data is intact: "
                 "{fix}").format(folder=named, manifest=MANIFEST, fix=fix)
    wrong = []
    for line in lines:
        digest, _sep, name = line.partition("  ")
        try:
            same = hashlib.sha256((root / name).read_bytes()).hexdigest() == digest
        except OSError:
            same = False
        if not same:
            wrong.append(name)
    if wrong:
        return _("the chapter's data is not as the project ships it ({files} in {folder}): {fix}, then run the check "
                 "again").format(files=cut(", ".join(wrong), 200), folder=named, fix=fix)
    _verified[:] = [listing]
    return None


class Watch:
    """``data/`` and the notebook's folder as a check starts, to tell after each case what a piece changed."""

    def __init__(self):
        self.root, self.named, _fix = _root()
        self.fix = _(FIX.get(self.named, FIX["data"]))
        self.data = _listing(self.root, True)
        self.folder = Path.cwd()
        self.files = _listing(self.folder, False)

    def changed(self, case: str = "") -> str | None:
        now = _listing(self.root, True)
        if now == self.data:
            return None
        return _("your piece changed the chapter's data in {folder} ({what}) during the case {case}: a piece reads "
                 "and writes only what it is given; {fix}, then run the check again").format(
            folder=self.named, what=_difference(self.data, now), case=case, fix=self.fix)

    def notes(self) -> list[str]:
        now = _listing(self.folder, False)
        if now == self.files:
            return []
        return [_("Your piece changed the notebook's folder, {folder} ({what}): a piece writes only where it is "
                  "told; put back what it changed.").format(folder=self.folder, what=_difference(self.files, now))]


def _difference(before: dict, after: dict) -> str:
    gone = [k for k in before if k not in after]
    new = [k for k in after if k not in before]
    changed = [k for k in after if k in before and after[k] != before[k] and not after[k][-1]]
    said = [_("{files} removed").format(files=", ".join(gone[:3])) if gone else "",
            _("{files} added").format(files=", ".join(new[:3])) if new else "",
            _("{files} changed").format(files=", ".join(changed[:3])) if changed else ""]
    return cut("; ".join(s for s in said if s) or _("its files' times"), 200)


__all__ = ["MANIFEST", "Watch", "damaged"]
