"""The check of notebook 00's pieces, the scripted provider without its HTTP: ``reply_to(scripts, model, messages)``
(the chapter's two lines: the turn and the tool text read off the transcript, the script called with them) and
``usage_of(messages, tools, message)`` (the bill: the tokens of the request's JSON, messages then tools, and of the
reply's text and calls).

Each case is a whole run of ``harness_lib.run`` whose model is the reader's two pieces, served in process as the
notebook's ``InProcess`` serves them (approving each call a run stops for, capping the scripts that never end at
6 turns), beside the same run against ``ScriptedProvider`` over HTTP: every script of the chapter, a run without
tools (billed for its messages alone), a run moved from the real server to the reader's half-way (a provider
that remembers anything cannot take it over), and one script of the check's own, served beside the chapter's as
the notebook serves ``skim``, that asks for two reads in one turn and answers with the turn and the tool text it
was given (served on the expected side by the library's ``turn_index`` and ``tool_text``, billed by
``tokens.usage``). Compared: status, turns, tool runs, tokens (each turn's too), dollars, the answer, the
transcript.
"""

from __future__ import annotations

from ..checking import (
    ANSWER,
    COST,
    IN,
    OUT,
    QUICK_SCAN,
    STATUS,
    TOOL_RUNS,
    TRANSCRIPT,
    TURNS,
    Case,
    Check,
    Field,
    Hint,
    Shape,
    plural,
    workspace,
)
from ..language import N_, NP_, Text, _, ngettext


def echo(t: int, tool_text: str) -> dict:
    """The check's own script: list, read two logs in one turn, then say the turn and every tool result."""
    from ...scripted.scripts import asks, call, text
    if t == 0:
        return asks(call("c1", "list_files", {}))
    if t == 1:
        return asks(call("c2", "read_file", {"path": "errors.log"}), call("c3", "read_file", {"path": "notes.txt"}))
    return text(f"turn {t}, told: {tool_text}")


def _case(script: str, point: str, tools: bool = True, moved: int | None = None) -> Case:
    if moved:   # the script's name stays English: a value of the message
        name = Text(NP_("{script}, moved to yours after {n} turn", "{script}, moved to yours after {n} turns"), "n",
                    script=script, n=moved)
    elif not tools:
        name = Text(N_("{script}, no tools"), script=script)
    else:   # the name alone: a template no catalogue has, so that `_()` shows it as it is (`answer` is a message)
        name = Text("{script}", script=script)
    return Case(name, point, {"script": script, "tools": tools, "moved": moved})


CASES = (  # the first case that fails is the one explained: the common path, the bill, the transcript read
    _case("plan", N_("the script's reply, and a bill of the request's tokens, served turn after turn")),
    _case("answer", N_("a request without tools is billed for its messages alone"), tools=False),
    _case("echo", N_("the turn is the number of assistant messages so far, the tool text every result joined by "
             "newlines: two results of one turn included")),
    _case("recover", N_("recover reads the error text it was sent, and recovers")),
    _case("recover", N_("the provider keeps nothing: a run begun elsewhere is taken over from its transcript"),
          moved=1),
    _case("runaway", N_("a script that never ends is served until the cap")),
    _case("destructive", N_("a run stopped for approval and continued is served from its transcript")),
    _case("direct", N_("every script is served as the real provider serves it")),
    _case("repeat", N_("every script is served as the real provider serves it")),
    _case("delete_twice", N_("every script is served as the real provider serves it")),
    _case("forbidden", N_("every script is served as the real provider serves it")),
    _case("slow", N_("every script is served as the real provider serves it")),
    _case("delegate", N_("a call to a tool the run does not have is answered with an error, and the script reads it")),
    _case("plan", N_("the provider keeps nothing: a run begun elsewhere is taken over from its transcript"), moved=2),
)


class _Served:
    """A model served in process by ``reply`` and ``bill`` (the reader's pieces, or the library's), as
    ``InProcess`` serves them; what they raise is kept, to be said as theirs (the loop would wrap it)."""
    def __init__(self, reply, bill, scripts: dict):
        self.reply, self.bill, self.scripts, self.raised, self.bills = reply, bill, scripts, [], []

    async def complete(self, model, messages, tools=None, **_):
        try:
            message = self.reply(self.scripts, model, messages)
            usage = self.bill(messages, tools, message)
        except Exception as error:  # noqa: BLE001 - the reader's, raised again after the run
            self.raised.append(error)
            raise
        if not isinstance(message, dict) or not isinstance(usage, dict):
            self.raised.append(Shape(Text(N_("`reply_to` returned {reply}, `usage_of` {usage}: return the script's "
                                             "message and a dict of tokens"),
                                          reply=type(message).__name__, usage=type(usage).__name__)))
            raise self.raised[-1]
        self.bills.append(dict(usage))
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


def _library(scripts: dict, model: str, messages: list) -> dict:
    from ...scripted.scripts import tool_text, turn_index
    return scripts[model](turn_index(messages), tool_text(messages))


async def _run(case: Case, url: str, served: _Served | None) -> dict:
    """The case's run to its end, approving what it stops for, through ``served`` (after ``moved`` turns on the
    real server, when moved) or, without it, the real server all along."""
    from ...loop import Options, run
    from ...state import approve, new_run
    from ...workspace import SYSTEM_PROMPT, TASK

    tools = workspace().tools(**QUICK_SCAN) if case.args["tools"] else []
    real, ours = {"base_url": url}, {"client": served} if served else {"base_url": url}
    first = real if case.args["moved"] else ours
    state = await run(new_run(SYSTEM_PROMPT, TASK, case.args["script"]), tools,
                      Options(max_turns=case.args["moved"] or 6, **first))
    if case.args["moved"]:
        state = await run(state, tools, Options(max_turns=6, **ours))
    while state.status == "interrupted" and (state.interruption or {}).get("type") == "approval":
        state = await run(approve(state, state.interruption["callId"]), tools, Options(max_turns=6, **ours))
    if served and served.raised:
        raise served.raised[0]
    bills = served.bills if served and served.reply is not _library else _bills(state, tools, case.args["moved"])
    return {"status": state.status + (f" ({state.error})" if state.error else ""), "turns": state.turns,
            "bills": bills, "tool_runs": state.tool_runs, "in": state.prompt_tokens, "out": state.completion_tokens,
            "cost_usd": state.own_cost_usd, "answer": state.output, "messages": state.messages}


def _bills(state, tools: list, moved: int | None) -> list[dict]:
    """What the scripted provider billed for each turn (after the first ``moved``): ``tokens.usage`` of each request
    and reply, the function the server bills with."""
    from ...tokens import usage
    schemas = [t.schema() for t in tools]
    asked = [i for i, m in enumerate(state.messages) if m["role"] == "assistant"][moved or 0:]
    return [usage(state.messages[:i], schemas, state.messages[i]) for i in asked]


def _scripts() -> dict:
    from ...scripted.scripts import SCRIPTS
    return {**SCRIPTS, "echo": echo}


async def yours(pieces: dict, case: Case, url: str) -> dict:
    return await _run(case, url, _Served(pieces["reply_to"], pieces["usage_of"], _scripts()))


async def expected(case: Case, url: str) -> dict:
    from ...scripted.scripts import SCRIPTS
    from ...tokens import usage
    # the chapter's scripts from the real server; the check's own from the library's functions, in process
    return await _run(case, url, None if case.args["script"] in SCRIPTS else _Served(_library, usage, _scripts()))


def _turn_bill(e: dict, y: dict, key: str):
    """(expected, yours) of the first turn whose ``key`` tokens differ."""
    return next(((a[key], b[key]) for a, b in zip(e["bills"], y["bills"]) if a[key] != b[key]), (None, None))


def _prompt_off(by):
    return lambda c, e, y: (lambda a, b: a is not None and by(a, b, c))(*_turn_bill(e, y, "prompt_tokens"))


HINTS = (
    Hint(N_("the turn is read off the transcript, the assistant messages so far, never remembered: a provider that "
            "keeps a count cannot take over a run begun elsewhere, nor serve the same script twice"),
         lambda c, e, y: c.args["moved"] is not None and y["turns"] != e["turns"]),
    Hint(N_("the turn is the number of assistant messages so far (a turn may hold several tool results)"),
         lambda c, e, y: c.args["script"] == "echo" and not str(y["answer"]).startswith(str(e["answer"])[:7])),
    Hint(N_("the tool text is the content of every tool message so far, joined by newlines"),
         lambda c, e, y: y["answer"] != e["answer"]),
    Hint(N_("the tool schemas are sent with every request, and billed with every request: count `compact(tools)` "
            "after the messages"), _prompt_off(lambda a, b, c: c.args["tools"] and b < a)),
    Hint(N_("a request without tools is billed for its messages alone (`if tools`)"),
         _prompt_off(lambda a, b, c: not c.args["tools"] and b > a)),
    Hint(N_("the prompt is the tokens of the request's JSON as one text, `count(compact(messages))`, not message by "
            "message"), _prompt_off(lambda a, b, c: True)),
    Hint(N_("the reply is billed for its text and its calls: `content` (none when it only calls) and the compact JSON "
            "of `tool_calls`, not the message's envelope"),
         lambda c, e, y: _turn_bill(e, y, "completion_tokens")[0] is not None),
    Hint(N_("the bill is the API's usage, three numbers under their names: `prompt_tokens`, `completion_tokens` and "
            "`total_tokens`, their sum (a reply without them is estimated by the harness, not billed)"),
         lambda c, e, y: y["bills"] != e["bills"]),
    Hint(N_("the script is called with the turn and the tool text, `scripts[model](turn, tool_text)`, and its message "
            "returned as it is"), lambda c, e, y: y["messages"] != e["messages"]),
)

def _short(text) -> str:
    return repr(text if not isinstance(text, str) or len(text) <= 50 else text[:47] + "...")


def _bill_difference(e, y) -> str:
    n, a, b = next(((n, a, b) for n, (a, b) in enumerate(zip(e, y), 1) if a != b), (None, None, None))
    if n:
        return _("bill {n}: expected {expected}, yours {yours}").format(n=n, expected=a, yours=b)
    return ngettext("{expected} bill expected, yours {yours}", "{expected} bills expected, yours {yours}",
                    len(e)).format(expected=len(e), yours=len(y))


BILLS = Field("bills", show=lambda b: plural(len(b), NP_("{n:,} bill", "{n:,} bills")) if isinstance(b, list)
              else repr(b), describe=_bill_difference, follows=True)
ANSWERED = Field("answer", show=ANSWER.show, describe=lambda e, y: _("{field}: expected {expected}, yours {yours}")
                 .format(field=_(ANSWER.label), expected=_short(e), yours=_short(y)))


# The words a reader's pieces must return or know, each named in the exercise notebook (tests/test_contracts.py)
CONTRACT = ('prompt_tokens', 'completion_tokens', 'total_tokens', 'assistant', 'tool', 'content', 'tool_calls')
CHECK = Check("00-scripted-provider", ("reply_to", "usage_of"), CASES,
              (STATUS, TURNS, TOOL_RUNS, ANSWERED, IN, OUT, COST, BILLS, TRANSCRIPT), yours, expected, HINTS)


async def check(reply_to, usage_of, url: str | None = None):
    """Serve every case of section 0 with your ``reply_to`` and ``usage_of`` beside the scripted provider: a table,
    ``N of M cases pass``, and for the first case that fails, what differs and what to change."""
    return await CHECK.run(url, reply_to=reply_to, usage_of=usage_of)
