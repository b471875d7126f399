"""Mistakes in notebook 13's ``research_tool``."""

from . import mistake

LIMITS = "max_turns=max_turns,\n                                                    max_budget_usd=max_budget_usd, "
CANCELLED = ('        if out.status == "interrupted" and out.interruption["type"] == "cancelled":\n'
             '            raise asyncio.CancelledError(out.interruption["reason"])'
             '           # one Stop ends the tree\n')
REPORT = ('        ctx.report_subrun({"runId": out.run_id, "status": out.status, "turns": out.turns,\n'
          '                           "costUsd": out.total_cost_usd, "messages": len(out.messages)})\n')
ANSWER = 'return out.output if out.status == "completed" else f"no result: the research run ended {out.status}"'

MISTAKES = (
    mistake("the child without limits of its own: the runaway child never ends", (LIMITS, ""),
            hint="your child never stopped"),
    mistake("the child capped by its turns alone, its budget forgotten",
            ("max_budget_usd=max_budget_usd, ", ""), hint="past its own budget"),
    mistake("the child limited by its budget alone, its cap forgotten",
            ("max_turns=max_turns,\n                                                    ", ""),
            hint="past its own cap"),
    mistake("the chapter's limits written in, not the ones the tool was given",
            (LIMITS, "max_turns=6,\n                                                    max_budget_usd=0.05, "),
            hint="past its own budget"),
    mistake("the child started with the parent's system prompt, not its own",
            ("from harness_lib.tools import",
             "from harness_lib.workspace import SYSTEM_PROMPT\nfrom harness_lib.tools import"),
            ("new_run(RESEARCH_SYSTEM, args", "new_run(SYSTEM_PROMPT, args"), hint="its own system prompt"),
    mistake("the cancelled child turned into a result: Stop ends the child but not the parent", (CANCELLED, ""),
            hint="Stop did not end the tree"),
    mistake("every interrupted child taken for a Stop, the one waiting for approval too",
            (' and out.interruption["type"] == "cancelled"', ""), hint="a child stopped for approval"),
    mistake("the Stop raised on without its reason",
            ('raise asyncio.CancelledError(out.interruption["reason"])', "raise asyncio.CancelledError()"),
            hint="without its reason"),
    mistake("the child's spend never reported to the parent", (REPORT, ""), hint="no child was reported"),
    mistake("the child's output returned whatever became of it", (ANSWER, "return out.output"),
            hint="return 'no result: the research run ended <status>'"),
    mistake("the child's whole transcript handed to the parent", (ANSWER, "return json.dumps(out.messages)"),
            ("import asyncio\n", "import asyncio\nimport json\n"), hint="not its transcript"),
    mistake("the child's trace kept apart from the parent's", (", trace=ctx.trace", ""),
            hint="pass `trace=ctx.trace`"),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("the spend reported as `cost_usd`, as RunState spells it, not the trace's `costUsd`",
            ('"costUsd": out.total_cost_usd', '"cost_usd": out.total_cost_usd'), hint="`costUsd`"),
    mistake("a stopped child re-raised as a plain exception",
            ('raise asyncio.CancelledError(out.interruption["reason"])',
             'raise RuntimeError(out.interruption["reason"])'),
            hint="as `asyncio.CancelledError`"),
)
