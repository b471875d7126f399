"""Mistakes in notebook 16's harness, the capstone: each costs the figures of the section whose lesson it breaks,
and the first figure that differs names that section."""

from . import mistake

MISTAKES = (
    mistake("the cap compared with `>`: one turn more than the cap allows",
            ('state["turns"] >= max_turns', 'state["turns"] > max_turns'),
            hint="section 2: the cap checked before each turn is paid for"),
    mistake("the dedupe cache kept in the call of the loop, forgotten when the run stops for an approval",
            ('if key in state["seen"] and', 'seen = {}\n    if key in seen and'),
            ('return state["seen"][key]', 'return seen[key]'),
            hint="section 6: only read-only calls are answered from the cache"),
    mistake("the run saved only when it ends: a crash leaves nothing to resume",
            ("            if folder:\n                save(state, folder)\n            last", "            last"),
            hint="section 8: every step saved before the next is paid for"),
    mistake("a rejection that never tells the model why: the slot left empty",
            ('state["rejected"][call_id] = ("" if silent else', 'state["rejected"][call_id] = ("" if True else'),
            hint="section 7: a call that needs approval stops the run; the verdict, kept across a restart, fills"),
    mistake("Stop not caught: the cancellation goes through the harness, the run never says it was interrupted",
            ("    except asyncio.CancelledError as e:", "    except KeyboardInterrupt as e:"),
            hint="section 9: Stop cancels the run's task"),
    mistake("the budget counted from the text's length instead of the reply's usage",
            ('state["in"] += used["prompt_tokens"]', 'state["in"] += len(json.dumps(state["messages"])) // 4'),
            hint="section 1: three turns, every turn's tokens added up from the replies' usage"),
)
