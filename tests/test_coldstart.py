"""What keeps ``python -m harness_lib run plan`` starting fast (issue 23 item 5; ``python -m benchmarks.coldstart``
measures it): nothing here is timed, each test pins a piece of work the command no longer does."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import httpx
import pytest

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
