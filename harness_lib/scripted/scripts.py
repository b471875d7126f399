"""The scripted model: one pure function per scenario.

A script sees only what a real model would see, the conversation, and returns the assistant's next
message. Two facts carry the design:

* the turn index is *derived* from the conversation (the number of assistant messages so far), never
  kept in a variable, so the provider holds no state between requests and a run can be killed and
  resumed against it;
* a script may read the tool results so far (``tool_text``, every tool message joined by newlines),
  which is the least a scripted model needs for us to measure whether the harness told it anything
  worth reading.

Each script takes ``(turn, tool_text)`` and returns a message dict in the chat completions format.
"""

from __future__ import annotations

from typing import Callable

from ..tokens import compact

Script = Callable[[int, str], dict]


def call(call_id: str, name: str, args: str | dict = "{}") -> dict:
    """One tool call as a model sends it. ``args``: a dict (sent as compact JSON, ``tokens.compact``) or the
    raw text, which need not be JSON at all."""
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else compact(args)}}


def asks(*calls: dict) -> dict:
    """An assistant message that calls tools. Such messages carry ``"content": null``."""
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def text(content: str) -> dict:
    return {"role": "assistant", "content": content}


TIMEOUT_ANSWER = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
SHORT_ANSWER = "errors.log mentions a timeout."
DELETED = "Deleted access.log to free space."
DECLINED = "I did not delete anything: you declined the deletion."


def plan(t: int, _: str) -> dict:
    """A well-behaved task: list, read, answer."""
    if t == 0:
        return asks(call("c1", "list_files", {}))
    if t == 1:
        return asks(call("c2", "read_file", {"path": "errors.log"}))
    return text(TIMEOUT_ANSWER)


def runaway(t: int, _: str) -> dict:
    """Never declares itself done."""
    return asks(call(f"c{t}", "list_files", {}))


def recover(t: int, tool_text: str) -> dict:
    """Guesses a file name, then corrects itself if, and only if, it was told what happened."""
    if t == 0:
        return asks(call("c1", "read_file", {"path": "timeout.log"}))
    if "Call list_files" not in tool_text:
        return text("I could not read the file, so I do not know.")
    if t == 1:
        return asks(call("c2", "list_files", {}))
    if t == 2:
        return asks(call("c3", "read_file", {"path": "errors.log"}))
    return text(SHORT_ANSWER)


def destructive(t: int, tool_text: str) -> dict:
    """Lists the files, then asks to delete one the task never mentioned; reports what it was told."""
    if t == 0:
        return asks(call("c1", "list_files", {}))
    if t == 1:
        return asks(call("c2", "delete_file", {"path": "access.log"}))
    return text(DECLINED if "declined" in tool_text else DELETED)


def direct(t: int, _: str) -> dict:
    """The baseline of the repeat pair: one read, one answer."""
    if t == 0:
        return asks(call("c1", "read_file", {"path": "errors.log"}))
    return text(SHORT_ANSWER)


def repeat(t: int, _: str) -> dict:
    """The same task with the identical call repeated in two consecutive turns."""
    if t in (0, 1):
        return asks(call(f"c{t + 1}", "read_file", {"path": "errors.log"}))
    return text(SHORT_ANSWER)


def delete_twice(t: int, _: str) -> dict:
    """A repeated *write*: the identical delete in two consecutive turns."""
    if t in (0, 1):
        return asks(call(f"c{t + 1}", "delete_file", {"path": "access.log"}))
    return text(DELETED)


def forbidden(t: int, _: str) -> dict:
    """Retries, forever, a read the process may not perform: no error message can fix it."""
    return asks(call(f"c{t + 1}", "read_file", {"path": "/etc/shadow"}))


def slow(t: int, tool_text: str) -> dict:
    """Starts the deliberately slow scan_archive, then reports its last line."""
    if t == 0:
        return asks(call("c1", "scan_archive", {"pattern": "timeout"}))
    return text(f"The archive scan finished: {tool_text.splitlines()[-1] if tool_text else 'no result'}")


def delegate(t: int, tool_text: str) -> dict:
    """A parent that hands one question to a research subagent, then passes its summary on."""
    if t == 0:
        return asks(call("c1", "research", {"question": "Which file mentions a timeout?"}))
    return text(f"The research subagent reports: {tool_text.splitlines()[-1] if tool_text else 'nothing'}")


def answer(t: int, _: str) -> dict:
    """Answers at once, without a tool: the shortest completed run."""
    return text("Nothing to do: the workspace looks fine.")


SCRIPTS: dict[str, Script] = {
    "plan": plan,
    "runaway": runaway,
    "recover": recover,
    "destructive": destructive,
    "direct": direct,
    "repeat": repeat,
    "delete_twice": delete_twice,
    "forbidden": forbidden,
    "slow": slow,
    "delegate": delegate,
    "answer": answer,
}


def turn_index(messages: list[dict]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def tool_text(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "tool")


def next_message(scenario: str, messages: list[dict]) -> dict:
    """The scripted model's reply to ``messages``: a pure function of the conversation."""
    return SCRIPTS[scenario](turn_index(messages), tool_text(messages))
