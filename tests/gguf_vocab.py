"""A vocabulary fixture: a GGUF file with no weights, only a vocabulary llama.cpp can load (``vocab_only``).

``with_tokens(source, path, added)`` copies the metadata of ``source`` (the bundled SmolLM2 model: its BPE
vocabulary, merges and pre-tokenizer) and appends the tokens of ``added`` with the types given, as another
model's GGUF declares them. So a test reads, with llama.cpp's own tokenizer, a vocabulary that has Qwen's and
Llama's tool tokens, without downloading either model. Only what the test needs of the GGUF format (version 3):
the header and the key-value pairs, no tensor.
"""

from __future__ import annotations

import struct
from pathlib import Path

CONTROL, USER_DEFINED = 3, 4   # GGUF's token types (tokenizer.ggml.token_type)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def read_metadata(path: Path) -> dict[str, tuple[int, object]]:
    """The key-value pairs of a GGUF file: ``{key: (type, value)}``, an array's value ``(element type, list)``."""
    with open(path, "rb") as f:
        magic, version, _tensors, count = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF" or version != 3:
            raise ValueError(f"{path} is not a GGUF file of version 3")

        def value(kind):
            if kind == _STRING:
                (n,) = struct.unpack("<Q", f.read(8))
                return f.read(n).decode("utf-8")
            if kind == _ARRAY:
                element, n = struct.unpack("<IQ", f.read(12))
                return element, [value(element) for _ in range(n)]
            fmt = "<" + _SCALAR[kind]
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        pairs = {}
        for _ in range(count):
            key = value(_STRING)
            (kind,) = struct.unpack("<I", f.read(4))
            pairs[key] = (kind, value(kind))
        return pairs


def write_metadata(path: Path, pairs: dict[str, tuple[int, object]]) -> Path:
    def value(kind, v) -> bytes:
        if kind == _STRING:
            data = v.encode("utf-8")
            return struct.pack("<Q", len(data)) + data
        if kind == _ARRAY:
            element, items = v
            return struct.pack("<IQ", element, len(items)) + b"".join(value(element, i) for i in items)
        return struct.pack("<" + _SCALAR[kind], v)

    out = struct.pack("<4sIQQ", b"GGUF", 3, 0, len(pairs)) + b"".join(
        value(_STRING, k) + struct.pack("<I", kind) + value(kind, v) for k, (kind, v) in pairs.items())
    path.write_bytes(out + b"\0" * (-len(out) % 32))
    return path


def with_tokens(source: Path, path: Path, added: dict[str, int], bos: str | None = None) -> Path:
    """``source``'s vocabulary with the tokens of ``added`` (text: GGUF token type) appended, written to ``path``;
    ``bos``, one of them, the token every prompt starts with (as Llama 3's <|begin_of_text|>)."""
    pairs = read_metadata(source)
    tokens, types = pairs["tokenizer.ggml.tokens"][1][1], pairs["tokenizer.ggml.token_type"][1][1]
    pairs["tokenizer.ggml.tokens"] = (_ARRAY, (_STRING, [*tokens, *added]))
    pairs["tokenizer.ggml.token_type"] = (_ARRAY, (5, [*types, *added.values()]))
    arch = pairs["general.architecture"][1]
    pairs[f"{arch}.vocab_size"] = (4, len(tokens) + len(added))
    if bos is not None:
        pairs["tokenizer.ggml.bos_token_id"] = (4, len(tokens) + list(added).index(bos))
        pairs["tokenizer.ggml.add_bos_token"] = (7, True)
    return write_metadata(path, pairs)
