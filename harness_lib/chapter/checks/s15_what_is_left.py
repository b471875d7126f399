"""The check of notebook 15's pieces, beyond the chapter: the window policy ``drop_old_tool_results(keep_last,
placeholder)`` (every tool result but the newest ``keep_last`` is sent as the placeholder, in its place, its call
id and name kept; the transcript itself never touched) and the request of ``agent_loop(url, model, messages,
tools, max_turns, window)`` (each request sends ``window(messages)``, or the whole transcript without a window).

Each case runs the reader's loop with the reader's window on a script the loop applies to: without a window (the
loop must then be the library's), with the notebook's window of 1, with 0 (the newest result dropped too), with
more results kept than a request has, with a placeholder that says what the model needs, on ``recover`` (which
reads its results, so that a window makes it forget), ``plan``, ``forbidden``, ``repeat`` and ``answer``, and a
cap that ends the run on a tool call. The library has no window: expected is ``harness_lib.run`` asking its model
through a client that sends the window's view of the transcript (the policy written here, as the notebook says
it) while the run keeps the whole transcript. The notebook's loop checks its cap after the reply, as the library
does, so a capped run's last calls stay owed on both sides. Compared: status, turns, tool runs, tokens (each
request's too), dollars, the answer, each request the window made, and the transcript kept.
"""

from __future__ import annotations

import copy

from ..checking import (
    ANSWER,
    COST,
    IN,
    OUT,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    returned,
    start,
    workspace,
)
from ..language import N_, Text, _, ngettext

DROPPED = "(dropped)"     # the notebook's placeholder
SAYS = "Call list_files to see what exists."   # one that keeps what recover reads


def _case(script: str, cap: int, keep: int | None, point: str, placeholder: str = DROPPED) -> Case:
    # TRANSLATORS: a case's name: "runaway, cap 8, keep 1": the script, its turn cap, and how many tool results the
    # window keeps whole (keep_last)
    name = Text(N_("{script}, cap {cap}, no window"), script=script, cap=cap) if keep is None else \
        Text(N_("{script}, cap {cap}, keep {keep}"), script=script, cap=cap, keep=keep)
    if placeholder != DROPPED:
        # TRANSLATORS: a case's name, then the placeholder its window sends (as Python writes a string)
        name = Text(N_("{case}, placeholder {placeholder}"), case=name, placeholder=repr(placeholder))
    return Case(name, point, {"script": script, "cap": cap, "keep": keep, "placeholder": placeholder})


CASES = (  # the first case that fails is the one explained: the loop alone, then the window's edges
    _case("plan", 20, None, N_("without a window every request resends the whole transcript, as the library does")),
    _case("runaway", 8, 1,
          N_("every tool result but the newest is sent as the placeholder; the transcript stays whole")),
    _case("runaway", 8, 0, N_("a window keeping 0 results sends every one of them as the placeholder, the newest too")),
    _case("runaway", 8, 3, N_("a request with fewer results than keep_last sends them all whole")),
    _case("recover", 20, 1, N_("recover's error is dropped once it is old: it forgets why it listed the files")),
    _case("recover", 20, 3, N_("a window that keeps every result changes nothing")),
    _case("recover", 20, 1, N_("a placeholder that keeps the sentence recover reads lets it recover"), SAYS),
    _case("plan", 20, 1, N_("plan never reads what it asked for: the window saves tokens and changes nothing else")),
    _case("forbidden", 12, 1, N_("the window shrinks every request after the second; the cap still ends the run")),
    _case("recover", 1, 1, N_("a cap that ends the run on a tool call leaves that call owed, window or not")),
    _case("repeat", 20, 2, N_("the window changes what is sent, never the calls the loop runs")),
    _case("answer", 20, 0, N_("a run without tool results has nothing to drop")),
    _case("runaway", 13, None, N_("without a window the runaway's requests grow as the library's do")),
)

KEYS = ("status", "turns", "tool_runs", "in", "out", "cost_usd", "prompts", "answer")


def policy(keep_last: int, placeholder: str):
    """The window, as the notebook says it: every tool result but the newest ``keep_last`` sent as ``placeholder``."""
    def window(messages: list[dict]) -> list[dict]:
        results = [i for i, m in enumerate(messages) if m["role"] == "tool"]
        old = set(results[:len(results) - keep_last]) if keep_last < len(results) else set()
        return [{**m, "content": placeholder} if i in old else m for i, m in enumerate(messages)]
    return window


def _recording(window, sent: list):
    def recorded(messages):
        view = window(messages)
        sent.append(copy.deepcopy(view))
        return view
    return recorded


async def yours(pieces: dict, case: Case, url: str) -> dict:
    messages, sent, a = start(), [], case.args
    window = None if a["keep"] is None else _recording(pieces["drop_old_tool_results"](a["keep"], a["placeholder"]),
                                                       sent)
    got = await pieces["agent_loop"](url, a["script"], messages, workspace().tools(seconds=0.05), a["cap"], window)
    return {**returned(got, KEYS, "agent_loop"), "sent": sent, "messages": messages}


class _Windowed:
    """A model client that sends ``window(messages)`` (each request recorded in ``sent``) for a run that keeps its
    whole transcript."""
    def __init__(self, client, window, sent: list):
        self.client, self.window, self.sent = client, window, sent

    async def complete(self, model, messages, tools=None, **extra):
        view = self.window(messages) if self.window else messages
        self.sent.append(copy.deepcopy(view)) if self.window else None
        return await self.client.complete(model, view, tools, **extra)


async def expected(case: Case, url: str) -> dict:
    from ...loop import Options, run
    from ...state import new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    a, sent = case.args, []
    window = None if a["keep"] is None else policy(a["keep"], a["placeholder"])
    client = Options(base_url=url).transport.connect()
    try:
        state = await run(new_run(SYSTEM_PROMPT, TASK, a["script"]), workspace().tools(seconds=0.05),
                          Options(client=_Windowed(client, window, sent), max_turns=a["cap"]))
    finally:
        await client.aclose()
    return {"status": state.status, "turns": state.turns, "tool_runs": state.tool_runs, "in": state.prompt_tokens,
            "out": state.completion_tokens, "cost_usd": state.own_cost_usd,
            "prompts": [t["prompt_tokens"] for t in state.per_turn], "answer": state.output or None, "sent": sent,
            "messages": state.messages}


def _sent_difference(expected, yours) -> str:
    if not isinstance(yours, list) or len(yours) != len(expected):
        return ngettext("the window made {expected} request, yours {yours}",
                        "the window made {expected} requests, yours {yours}", len(expected)).format(
            expected=len(expected), yours=len(yours) if isinstance(yours, list) else yours)
    for n, (e, y) in enumerate(zip(expected, yours), 1):
        if len(e) != len(y):
            return ngettext("request {n} has {expected} message, yours {yours}",
                            "request {n} has {expected} messages, yours {yours}", len(e)).format(
                n=n, expected=len(e), yours=len(y))
        for i, (a, b) in enumerate(zip(e, y), 1):
            if a != b:
                keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                # TRANSLATORS: "content expected '(dropped)', yours '...'": a message's key, as the code names it
                said = [_("{key} expected {expected}, yours {yours}").format(
                    key=k, expected=repr(str(a.get(k))[:40]), yours=repr(str(b.get(k))[:40])) for k in keys]
                # TRANSLATORS: "request 3, message 4 (tool): content expected ..."; the role as the transcript says it
                return _("request {n}, message {i} ({role}): {differences}").format(
                    n=n, i=i, role=a.get("role"), differences="; ".join(said))
    return _("the requests differ")


# TRANSLATORS: "requests of 204 to 342 tokens": the first request's input tokens and the last's
PROMPTS = Field("prompts", show=lambda p: _("requests of {first:,} to {last:,} tokens").format(first=p[0], last=p[-1])
                if p and isinstance(p, list) else repr(p), label=N_("each request's input tokens"), follows=True)
# TRANSLATORS: "12 windowed": how many requests went through the window
SENT = Field("sent", show=lambda s: _("{n} windowed").format(n=len(s)) if s else _("not windowed"),
             describe=_sent_difference)


def _request(e: dict, y: dict):
    """The first request the window made differently: (expected, yours), or (None, None)."""
    return next(((a, b) for a, b in zip(e["sent"], y["sent"]) if a != b), (None, None))


def _dropped(view, placeholder) -> list[bool]:
    """Which of a request's tool results went as the placeholder."""
    return [m.get("content") == placeholder for m in view or [] if isinstance(m, dict) and m.get("role") == "tool"]


def _fewer_than_kept(c: Case, e: dict, y: dict) -> bool:
    a, b = _request(e, y)
    ph = c.args["placeholder"]
    return a is not None and len(_dropped(a, ph)) < c.args["keep"] and _dropped(a, ph) != _dropped(b, ph)


def _newest_dropped(c: Case, e: dict, y: dict) -> bool:
    a, b = _request(e, y)
    ph = c.args["placeholder"]
    return a is not None and any(_dropped(b, ph)[-1:]) and not any(_dropped(a, ph)[-1:])


def _unpaired(c: Case, e: dict, y: dict) -> bool:
    """A request whose messages do not line up with the expected one's, call id for call id."""
    return any([m.get("tool_call_id") for m in a] != [m.get("tool_call_id") for m in b]
               for a, b in zip(e["sent"], y["sent"]))


def _others_changed(c: Case, e: dict, y: dict) -> bool:
    """A request whose messages other than tool results differ from the expected one's."""
    return any([m for m in a if m.get("role") != "tool"] != [m for m in b if m.get("role") != "tool"]
               for a, b in zip(e["sent"], y["sent"]))


def _transcript_windowed(c: Case, e: dict, y: dict) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" and m.get("content") == c.args["placeholder"]
               for m in y["messages"] if isinstance(y["messages"], list)) and e["messages"] != y["messages"]


HINTS = (
    Hint(N_("without a window the loop sends the transcript as it is: `window(messages) if window else messages`"),
         lambda c, e, y: c.args["keep"] is None and y.get("raised") is not None),
    Hint(N_("your loop never asked the window: each request sends `window(messages)`, the transcript kept whole"),
         lambda c, e, y: c.args["keep"] is not None and y["sent"] == [] and e["sent"]),
    Hint(N_("the window changed the transcript itself: build new messages (`{**m, 'content': placeholder}`), the "
            "transcript the loop keeps stays whole, only what is sent changes"), _transcript_windowed),
    Hint(N_("your loop windowed its own transcript: the transcript the caller gave keeps every message, whole; "
            "only what is sent is `window(messages)`"),
         lambda c, e, y: y["sent"] == e["sent"] and y["messages"] != e["messages"]),
    Hint(N_("the placeholder given is the one to send, not one of your own"),
         lambda c, e, y: c.args["placeholder"] != DROPPED and DROPPED in str(y["sent"])),
    Hint(N_("a tool result must follow the call it answers: replace its text only, keep the message where it is, "
            "with its `tool_call_id` and `name` (the call id ties the result to its call)"), _unpaired),
    Hint(N_("only tool results go out as the placeholder: the system prompt, the task and the assistant's calls are "
            "sent as they are"), _others_changed),
    Hint(N_("keep_last 0 keeps no result whole: all of them go as the placeholder, the newest too (`results[:-0]` is "
            "empty: count from the front, `len(results) - keep_last`)"),
         lambda c, e, y: c.args["keep"] == 0 and y["sent"] != e["sent"]),
    Hint(N_("with fewer results than keep_last, nothing is dropped: `len(results) - keep_last` is negative there, and "
            "a negative slice end drops from the front (`max(..., 0)`)"), _fewer_than_kept),
    Hint(N_("the newest keep_last results are the last ones: drop the older ones, before them, and send those at the "
            "end whole"), _newest_dropped),
    Hint(N_("every tool result but the newest keep_last goes as the placeholder: count the results of the whole "
            "transcript, not of the last turn"), lambda c, e, y: y["sent"] != e["sent"]),
    Hint(N_("each request is what the window made of the transcript: send the window's view, and keep appending to the "
            "transcript itself"), lambda c, e, y: y["prompts"] != e["prompts"]),
)

# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('status', 'turns', 'tool_runs', 'in', 'out', 'cost_usd', 'prompts', 'answer', 'content', 'tool_call_id',
            'name')
CHECK = Check("15-what-is-left", ("agent_loop", "drop_old_tool_results"), CASES,
              (STATUS, TURNS, TOOL_RUNS, SENT, IN, OUT, COST, ANSWER, PROMPTS, TRANSCRIPT), yours, expected, HINTS)


async def check(agent_loop, drop_old_tool_results, url: str | None = None):
    """Run your ``agent_loop`` with your ``drop_old_tool_results`` on every case of section 15's window beside
    ``harness_lib``: a table, ``N of M cases pass``, and for the first case that fails, what differs and what to
    change."""
    return await CHECK.run(url, agent_loop=agent_loop, drop_old_tool_results=drop_old_tool_results)
