"""Tool errors are context (the chapter's section 5): what a failed tool call tells the model.

One failure, three policies. ``"descriptive"`` (the default) puts the error's own message in the
transcript slot, so the model can act on it; ``"generic"`` says only that something failed, which is what
most codebases do and why their agents give up politely; ``"fatal"`` ends the run as ``failed`` with the
error (and still fills the slot, so the transcript stays well formed). A function of the exception is a
fourth policy: the reader writes the sentence.
"""

from __future__ import annotations

from typing import Callable, Literal, Union

Policy = Union[Literal["fatal", "generic", "descriptive"], Callable[[BaseException], str]]
POLICIES = ("fatal", "generic", "descriptive")
GENERIC_ERROR = "Error: the tool call failed."


def check(policy: object) -> None:
    """Raise ``ValueError`` for a policy that is neither one of ``POLICIES`` nor a function."""
    if not (callable(policy) or policy in POLICIES):
        raise ValueError(f"tool_errors must be one of {POLICIES} or a function, got {policy!r}")


def fatal(policy: Policy) -> bool:
    """Whether a tool failure ends the run."""
    return policy == "fatal"


def describe(e: BaseException) -> str:
    """An exception's message; its type's name too when the message is empty or cannot be had, or when it
    is not an ``Exception`` (``SystemExit: 3`` says more than ``3``)."""
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - a __str__ that raises still names a failure
        text = ""
    if text and isinstance(e, Exception):
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class PolicyError(RuntimeError):
    """A reader's policy function that failed: the run ends ``failed``, saying so (``loop.run``)."""


def error_text(policy: Policy, e: BaseException) -> str:
    """What the transcript slot of a failed call says, by policy. (Under "fatal" the run stops too.)"""
    if policy == "generic":
        return GENERIC_ERROR  # the model learns that something failed, not what
    if policy == "descriptive" or policy == "fatal" or not callable(policy):
        return f"Error: {describe(e)}"
    try:
        return str(policy(e))
    except Exception as broken:  # noqa: BLE001 - the reader's function: its failure is said, not thrown
        raise PolicyError(f"the tool_errors function raised {type(broken).__name__}: {describe(broken)}, "
                          f"given the error: {describe(e)}") from None
