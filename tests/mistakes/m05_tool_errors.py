"""Mistakes in the catch block of notebook 05's ``agent_loop``."""

from . import mistake

FATAL = ('                if policy == "fatal":                    # the run ends here, failed\n'
         '                    return {**run, "status": "failed", "error": f"{tool.name}: {error}"}\n')
WORDS = 'result = GENERIC if policy == "generic" else f"Error: {error}"'

MISTAKES = (
    mistake("under fatal the run goes on, the error in the slot", (FATAL, ""), hint="under `fatal` a failed call "
                                                                                   "ends the run at once"),
    mistake("generic passes on the error's words, as descriptive does", (WORDS, 'result = f"Error: {error}"'),
            hint="under `generic` the slot says only that the call failed"),
    mistake("descriptive says only that the call failed", (WORDS, "result = GENERIC"),
            hint="under `descriptive` the slot is the error's own words"),
    mistake("descriptive passes the bare message, without the chapter's `Error: `",
            (WORDS, 'result = GENERIC if policy == "generic" else str(error)'),
            hint="under `descriptive` the slot is the error's own words"),
    mistake("only a missing file caught", ("except Exception as error:", "except FileNotFoundError as error:"),
            hint="catch every `Exception` a tool raises"),
    mistake("everything caught, Stop too", ("except Exception as error:", "except BaseException as error:"),
            hint="Stop arrives as `asyncio.CancelledError`"),
    mistake("a fatal run's error without the tool's name",
            ('"error": f"{tool.name}: {error}"', '"error": str(error)'), hint="says which tool failed and why"),
    mistake("a fatal run's status named in other words", ('"status": "failed"', '"status": "fatal"'),
            hint="under `fatal` a failed call ends the run at once, `failed`"),
    mistake("under fatal, the error raised again instead of the run returned failed",
            ('return {**run, "status": "failed", "error": f"{tool.name}: {error}"}', 'raise'),
            hint="under `fatal` the run ends, it does not raise"),
)
