"""A subagent is a tool: a tool whose ``run`` starts a child run.

The child has its own transcript (the parent's window gets the child's answer, not everything the child
read), its own limits (a runaway child stops at its own cap and cannot spend the parent's budget), and
it runs inside the parent's task, so one Stop cancels the whole tree. Its spend is reported to the
parent, which counts it in ``total_cost_usd`` and in its budget.
"""

from __future__ import annotations

import asyncio

from .client import ModelClient, Transport
from .loop import Options, run
from .pricing import CHAPTER_PRICES, Pricing
from .state import new_run
from .tools import Tool, ToolContext, string_params

RESEARCH_SYSTEM = ("You are a research assistant. "
                   "Investigate the question with the tools and reply with a short summary.")


def research_tool(child_tools: list[Tool], base_url: str, model: str = "plan", *, max_turns: int = 6,
                  max_budget_usd: float = 0.05, api_key: str = Transport.api_key,
                  pricing: Pricing = CHAPTER_PRICES) -> Tool:
    """The child asks its model through the parent's client (``ctx.client``: one connection, one set of
    retries for the whole tree; its streamed text is not shown: the child's answer is the parent's tool
    result); ``base_url`` and ``api_key`` reach it when the tool runs outside a loop.
    ``pricing``: the parent's (the child is paid from the same account). Without a price the child's
    budget cannot act: it is capped by its turns alone, and its dollars are unknown, as the parent's."""
    async def research(args: dict, ctx: ToolContext) -> str:
        question = args.get("question")
        if not isinstance(question, str) or not question:
            raise ValueError("question must be a non-empty string")
        child = new_run(RESEARCH_SYSTEM, question, model, run_id=f"{ctx.run_id}.{ctx.call_id}")
        client = ctx.client.without_text() if isinstance(ctx.client, ModelClient) else ctx.client  # not streamed
        out = await run(child, child_tools, Options(base_url=base_url, api_key=api_key, client=client,
                                                    max_turns=max_turns,
                                                    max_budget_usd=max_budget_usd if pricing.known else None,
                                                    pricing=pricing, trace=ctx.trace))
        ctx.report_subrun({"runId": out.run_id, "status": out.status, "turns": out.turns,
                           "costUsd": out.total_cost_usd, "messages": len(out.messages)})
        why = out.interruption or {}
        if out.status == "interrupted" and why.get("type") == "cancelled":
            raise asyncio.CancelledError(why["reason"])  # one Stop ends the tree
        return (out.output or "") if out.status == "completed" else f"no result: the research run ended {out.status}"

    return Tool("research", "Investigate one question and return a short summary.", research,
                string_params("question"), read_only=True)
