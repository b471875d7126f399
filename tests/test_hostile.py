"""Links, planted files, cut streams and rounding (issue 20): each way a run could still be led astray,
tried as a hostile server, model or operator would, with what the harness must do instead.

The command-line cases (a tampered state file, a planted link in the state folder, a lock file removed)
are also cases of the operator campaign (``tests/operator_campaign.py``), which counts them with the others.
"""

from __future__ import annotations

import json

from replay_server import ReplayServer, fixture
from test_conformance import ANSWER, FAST, drive


# -- 7. a stream cut short is a dropped reply, never an answer ---------------------------------------------------
class CutStream(ReplayServer):
    """Streams the final turn's text without its finish_reason and without [DONE], then closes the connection
    cleanly (no transport error): ``cuts`` times, then whole."""

    def __init__(self, *args, cuts: int, **kw):
        super().__init__(*args, **kw)
        self.cuts = cuts

    def _sse(self, h, chunks):
        final = any(c.get("choices") and c["choices"][0].get("finish_reason") == "stop" for c in chunks)
        if not final or self.cuts == 0:
            return super()._sse(h, chunks)
        self.cuts -= 1
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for c in chunks:
            if c.get("choices") and c["choices"][0].get("finish_reason"):
                break  # the text so far, and then the stream simply ends
            h.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        h.wfile.flush()


def test_a_stream_cut_short_is_asked_again_not_taken_as_the_answer(tmp_path):
    f = fixture("openai")
    with CutStream(f["replies"], f["stream"], cuts=1) as replay:
        state, events = drive(tmp_path, replay.base_url, stream=True, **FAST)
    assert (state.status, state.output, state.turns) == ("completed", ANSWER, 3)
    retries = [e for e in events if e["type"] == "retry"]
    assert len(retries) == 1 and "without a finish_reason and [DONE]" in retries[0]["problem"]


def test_a_stream_always_cut_short_ends_the_run_interrupted_and_resumable(tmp_path):
    f = fixture("openai")
    with CutStream(f["replies"], f["stream"], cuts=99) as replay:
        state, _ = drive(tmp_path, replay.base_url, stream=True, max_retries=1, **FAST)
    assert (state.status, state.output, state.turns) == ("interrupted", None, 2)
    assert state.interruption["type"] == "cancelled" and "provider unreachable" in state.interruption["reason"]
    assert "cut short" in state.interruption["reason"]
