"""Mistakes in notebook 03's ``cost`` and ``budgeted_loop``."""

from . import mistake

CHECK = ('        if tally["cost_usd"] >= max_budget_usd:              # before asking the model anything\n'
         '            return {"status": "budget_exceeded", **tally}\n')
CALL = '        reply = await call_model(url, model, messages, schemas)\n'
PAY = ('        tally["last_turn_usd"] = cost(reply["usage"])        # paid as soon as the reply is back\n'
       '        tally["cost_usd"] = round(tally["cost_usd"] + tally["last_turn_usd"], 12)'
       '  # floats drift: keep 12 places\n')
LAST = '                             "name": call["function"]["name"], "content": result})'
AT_THE_BOTTOM = ('        if tally["cost_usd"] >= max_budget_usd:\n'
                 '            return {"status": "budget_exceeded", **tally}\n')

MISTAKES = (
    mistake("the budget compared with `>` where the chapter stops at `>=`",
            ('if tally["cost_usd"] >= max_budget_usd:', 'if tally["cost_usd"] > max_budget_usd:'),
            hint="one turn past a budget reached exactly"),
    mistake("the spend added up in plain floats",
            ('tally["cost_usd"] = round(tally["cost_usd"] + tally["last_turn_usd"], 12)',
             'tally["cost_usd"] += tally["last_turn_usd"]'), hint="floats drift"),
    mistake("the budget checked after the call, before its cost is added",
            (CHECK + CALL, CALL + CHECK), hint="asked the model for a turn it did not record"),
    mistake("the budget checked after paying for the turn, before its calls run",
            (CHECK + CALL + PAY, CALL + PAY + CHECK), hint="asked the model for a turn it did not record"),
    mistake("the budget checked at the bottom of the loop, once the calls ran: a budget of 0 still pays a turn",
            (CHECK, ""), (LAST, LAST + "\n" + AT_THE_BOTTOM), hint="a budget of 0 paid for a turn"),
    mistake("the prices swapped in cost()",
            ('usage["prompt_tokens"] * PRICE_IN + usage["completion_tokens"] * PRICE_OUT',
             'usage["prompt_tokens"] * PRICE_OUT + usage["completion_tokens"] * PRICE_IN'),
            hint="`cost(usage)` prices a turn from the tokens its reply reports"),
    mistake("a turn priced from the length of its text, four characters a token, not from its usage",
            ('cost(reply["usage"])', 'cost({"prompt_tokens": len(json.dumps(messages)) // 4, '
                                     '"completion_tokens": len(json.dumps(reply["message"])) // 4})'),
            hint="not from the text's length"),
    mistake("the spend kept as the last turn's price, not added up",
            ('tally["cost_usd"] = round(tally["cost_usd"] + tally["last_turn_usd"], 12)',
             'tally["cost_usd"] = tally["last_turn_usd"]'), hint="the sum of the turns' prices"),
    mistake("the budget compared with the last turn's price, not the whole spend",
            ('if tally["cost_usd"] >= max_budget_usd:', 'if tally["last_turn_usd"] >= max_budget_usd:'),
            hint="the sum of every turn's price"),
)
