"""The chapter's four tools, acting on a private copy of the package's ``data/workspace``.

``list_files``, ``read_file``, ``delete_file`` (needs approval) and ``scan_archive`` (deliberately slow,
reports progress, hears Stop). A tool acts on what a path resolves to, and only inside the workspace: a
path that leaves it (``..``, an absolute path, a symbolic link pointing out, for reading and deleting alike)
is refused with ``permission denied``. ``read_file`` opens what the path resolves to without following a
link put there since, and only a regular file (a FIFO or a device is "no such file"). ``delete_file``
deletes the entry the path names: a link inside the workspace is deleted as a link, never its target. A
file with more than one hard link is refused by both: its other name may be outside the workspace, and its
content is that file's (a copy made by ``copy_of`` has none; a folder given with ``--workspace`` may).

``delete_file`` keeps a journal beside the workspace, keyed by idempotency key (run id, run instance,
call id): a call whose deletion already happened is answered from the journal and never deletes twice.
The deletion itself is a rename: the file is moved aside, into ``<workspace>.trash/`` under a name made
from the key, before it is removed. So after a crash anywhere, "moved aside" means done and "still in
place" means not begun, even if something (a logger) has since created a new file with the same name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
import weakref
from pathlib import Path

from . import files
from .resources import data_path
from .tokens import compact
from .tools import Tool, ToolContext, string_params

# Never acted on: each run works on a copy (``Workspace.copy_of``) in a folder the user owns. Checked
# when copied, not here, so that an incomplete install is one clear error, not a failed import.
DATA_WORKSPACE = data_path("workspace", must_exist=False)

# The fixture every scripted run starts from. With the four schemas below, the first request of a run
# counts 204 prompt tokens, as in the chapter.
SYSTEM_PROMPT = "You are an operations assistant. Use the tools to inspect the workspace, then answer it briefly."
TASK = "Which file mentions a timeout?"


class Workspace:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"workspace folder {self.root} does not exist")
        self.journal = self.root.parent / f"{self.root.name}.journal.jsonl"
        self.trash = self.root.parent / f"{self.root.name}.trash"
        self._tail_checked = False
        self._cleanup: weakref.finalize | None = None  # a temporary copy's removal (``copy_of``)

    @classmethod
    def copy_of(cls, source: str | Path | None = None, into: str | Path | None = None) -> "Workspace":
        """A fresh copy of ``source`` (default: the package's ``data/workspace``) in a new temporary folder
        (or in ``into``), so no run touches the project's data. A temporary folder is removed with the
        workspace object (or at exit) unless ``keep()`` is called."""
        source = data_path("workspace") if source is None else source
        parent = Path(into) if into else Path(tempfile.mkdtemp(prefix="harness-ws-"))
        root = parent / "workspace"
        try:
            shutil.copytree(source, root, copy_function=shutil.copyfile)  # contents, not an installed file's mode
        except BaseException:
            if into is None:
                shutil.rmtree(parent, ignore_errors=True)
            raise
        for folder in (root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())):
            folder.chmod(folder.stat().st_mode | stat.S_IWUSR)  # a read-only install still gives a usable copy
        workspace = cls(root)
        if into is None:
            workspace._cleanup = weakref.finalize(workspace, shutil.rmtree, parent, True)
        return workspace

    def keep(self) -> "Workspace":
        """Keep a temporary copy after this object is gone (a saved run will need it to resume)."""
        if self._cleanup is not None:
            self._cleanup.detach()
        return self

    # -- paths ------------------------------------------------------------------------------------
    def resolve(self, path) -> Path:
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty string, got {path!r}")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in path) or "\0" in path:
            raise ValueError(f"path is not a file name: {path.encode('utf-8', 'backslashreplace').decode()!r}")
        target = (self.root / self._real(path)).resolve()
        if target != self.root and self.root not in target.parents:
            raise PermissionError(f"permission denied: {path}")
        return target

    def entry(self, path) -> Path:
        """The entry ``path`` names, its folders resolved and its last part not followed: a link is the link
        itself, not its target. Whatever it resolves to must be inside the workspace too (``resolve``)."""
        target = self.resolve(path)
        named = self.root / self._real(path)
        if named.name in ("", ".", "..") or named == self.root:
            return target  # a folder, never a file: the tools say "no such file"
        parent = named.parent.resolve()
        if parent != self.root and self.root not in parent.parents:
            raise PermissionError(f"permission denied: {path}")
        return parent / named.name

    def open_file(self, path) -> int:
        """A descriptor for reading the regular file ``path`` resolves to, inside the workspace, with one
        link to it: what it resolves to is opened without following a link put there meanwhile."""
        target = self.resolve(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"no such file: {path}. Call list_files to see what exists.") from None
        except OSError as e:
            if e.errno == errno.ELOOP:  # a link put in place of what resolve saw
                raise PermissionError(f"permission denied: {path}") from None
            raise
        try:
            self._one_link(os.fstat(fd), path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _one_link(st: os.stat_result, path: str) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(f"no such file: {path}. Call list_files to see what exists.")
        if st.st_nlink > 1:
            raise PermissionError(f"permission denied: {path} has {st.st_nlink} hard links, and another may be "
                                  f"outside the workspace")

    def files(self) -> list[str]:
        """The files' names; a name that is not UTF-8 is shown with its odd bytes escaped (``bad\\xff.log``)."""
        return sorted(_shown(p.name) for p in self.root.iterdir() if p.is_file())

    def _real(self, path: str) -> str:
        """The name on disk for a name ``files`` showed with escaped bytes (else ``path`` itself)."""
        if "\\x" in path and not (self.root / path).exists():
            for p in self.root.iterdir():
                if _shown(p.name) == path:
                    return p.name
        return path

    # -- the journal of writes ----------------------------------------------------------------------
    def journal_entries(self) -> list[dict]:
        try:
            text = files.read(self.journal, files.MAX_RECORD_BYTES, "a journal of writes").decode()
        except FileNotFoundError:
            return []
        entries = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn line: the write it described never finished recording
            if isinstance(entry, dict):
                entries.append(entry)
        return entries

    def _journal(self, entry: dict):
        fd = files.open_own(self.journal, os.O_RDWR | os.O_APPEND | os.O_CREAT, in_place=True)
        if not self._tail_checked:  # a predecessor killed mid-write left a fragment: cut it, as the trace does
            files.cut_torn_tail(fd)
            self._tail_checked = True
        with open(fd, "a") as f:
            f.write(json.dumps(entry, separators=(",", ":")) + "\n")  # ASCII: any file name survives
            f.flush()
            os.fsync(f.fileno())

    @property
    def deleted(self) -> list[str]:
        """Every path a delete_file run removed, in order (one entry per deletion that happened)."""
        return [e["path"] for e in self.journal_entries() if e.get("op") == "delete" and e.get("done")]

    @property
    def delete_runs(self) -> list[str]:
        """Every path delete_file was run on, whether or not there was still a file to remove."""
        return [e["path"] for e in self.journal_entries() if e.get("op") == "delete" and "done" in e]

    def _deletable(self, entry: Path, path: str) -> bool:
        """A link (deleted as a link) or a regular file with one link; False when there is none to delete."""
        try:
            st = os.lstat(entry)
        except (FileNotFoundError, NotADirectoryError):
            return False
        if stat.S_ISLNK(st.st_mode):
            return True
        try:
            self._one_link(st, path)
        except FileNotFoundError:
            return False
        return True

    def aside(self, key: str) -> Path:
        """Where ``delete_file`` moves the file of the operation ``key`` before removing it."""
        return self.trash / hashlib.sha256(key.encode()).hexdigest()[:32]

    # -- the tools ----------------------------------------------------------------------------------
    async def list_files(self, args: dict, ctx: ToolContext) -> str:
        return compact(self.files())

    async def read_file(self, args: dict, ctx: ToolContext) -> str:
        with open(self.open_file(args.get("path")), errors="replace") as f:  # (read_text's decoding, newlines)
            return f.read()

    async def delete_file(self, args: dict, ctx: ToolContext) -> str:
        key = ctx.idempotency_key
        mine = [e for e in self.journal_entries() if e.get("key") == key]
        for e in mine:
            if "done" in e:  # this operation already happened: answer, do not repeat it
                if not e["done"]:
                    raise FileNotFoundError(f"{e['result']}. Call list_files to see what exists.")
                return e["result"]
        target = self.entry(args.get("path"))  # a link is deleted as a link, never its target
        aside = self.aside(key)
        started = bool(mine)
        if started and os.path.lexists(aside):
            pass  # moved aside before a crash: done, whatever now stands at the path (a new file, say)
        elif not self._deletable(target, args["path"]):
            if not started:
                self._journal({"op": "delete", "key": key, "path": args["path"], "done": False,
                               "result": f"no such file: {args['path']}"})
                raise FileNotFoundError(f"no such file: {args['path']}. Call list_files to see what exists.")
            # begun, and the file is gone but not by us (a journal from before the move-aside): done
        else:
            if not started:
                self._journal({"op": "delete", "key": key, "path": args["path"], "started": True})
            self.trash.mkdir(exist_ok=True)
            if not stat.S_ISDIR(os.lstat(self.trash).st_mode):  # a link planted there would move it elsewhere
                raise PermissionError(f"permission denied: {self.trash.name} is not a folder of the harness's own")
            os.rename(target, aside)  # atomic: after this the deletion has happened, and says so
        result = f"deleted {args['path']}"
        self._journal({"op": "delete", "key": key, "path": args["path"], "done": True, "result": result})
        if os.path.lexists(aside):
            os.unlink(aside)
        return result

    def scan_archive_tool(self, seconds: float = 3.0, files: int = 1200, every: int = 200,
                          hears_stop: bool = True) -> Tool:
        """The deliberately slow tool: scans ``files`` archived files in ``seconds``, reporting progress
        every ``every`` files. With ``hears_stop=False`` it shields its work from cancellation, the way a
        tool does when the signal was threaded only into the model call: Stop then waits for it."""
        import asyncio  # here: a workspace without its slow tool does not load it
        steps = files // every

        async def scan(args: dict, ctx: ToolContext) -> str:
            pattern = args.get("pattern")
            if not isinstance(pattern, str) or not pattern:
                raise ValueError("pattern must be a non-empty string")

            async def work():
                for i in range(1, steps + 1):
                    await asyncio.sleep(seconds / steps)
                    ctx.progress(f"scanned {i * every} of {files} files")
                return f"scanned {files} archived files; 3 mention {pattern!r}"

            if hears_stop:
                return await work()
            task = asyncio.ensure_future(work())
            stopped = None
            while not task.done():
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError as e:
                    stopped = e  # heard nothing: keep going until the work is done
            if stopped is not None:
                raise stopped
            return task.result()

        return Tool("scan_archive", "Scan the log archive for a pattern. Slow.", scan,
                    string_params("pattern"), read_only=True)

    def tools(self, **scan_options) -> list[Tool]:
        return [
            Tool("list_files", "List the files in the workspace.", self.list_files, read_only=True),
            Tool("read_file", "Read one file from the workspace.", self.read_file, string_params("path"),
                 read_only=True),
            Tool("delete_file", "Delete one file from the workspace. Needs approval.", self.delete_file,
                 string_params("path"), needs_approval=True, idempotent=True),
            self.scan_archive_tool(**scan_options),
        ]


def _shown(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (``os`` keeps them as surrogates) escaped."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
