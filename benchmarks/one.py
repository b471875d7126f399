"""One harness, one fresh process: ``python -m benchmarks.one NAME BASE_URL [CAP]`` prints one JSON object.

A fresh process per measurement, so that import time is a cold import and peak memory is this harness's
alone. In order: time the harness's imports (nothing else of ours is imported before), run the 3-turn
plan once to warm up (discarded), the runaway capped at CAP model calls, then the plan again.
"""

from __future__ import annotations

import importlib
import sys
import time


def main(argv: list[str]) -> dict:
    name, base_url = argv[0], argv[1]
    cap = int(argv[2]) if len(argv) > 2 else 50
    from .harnesses_imports import IMPORTS

    t0 = time.perf_counter()
    for module in IMPORTS[name]:
        importlib.import_module(module)
    import_ms = (time.perf_counter() - t0) * 1000

    import asyncio
    import json
    import resource

    from .harnesses import HARNESSES, TOOL_RUNS
    from .meter import Meter, summary

    entry = HARNESSES[name]

    def measured(scenario: str, calls_cap: int):
        meter = Meter()
        TOOL_RUNS[0] = 0
        t = time.perf_counter()
        out = asyncio.run(entry(base_url, meter, scenario, calls_cap))
        wall_ms = (time.perf_counter() - t) * 1000
        meter.collect_usage()
        server = meter.server_totals()
        return meter, out, wall_ms, {
            "calls": meter.calls, "tool_runs": out.get("tool_runs", TOOL_RUNS[0]), "ended": out["ended"],
            "usage": out["usage"], "server_usage": server,
            "usage_matches": None if out["usage"] is None else out["usage"] == server,
            "wall_ms": wall_ms, "server_ms": sum(meter.server_ms)}

    measured("plan", 20)
    meter, _, _, runaway = measured("runaway", cap)
    runaway.update(summary(meter.overhead_ms()), overhead_ms=meter.overhead_ms(),
                   request_bytes_last=meter.request_bytes[-1])
    _, _, _, plan = measured("plan", 20)
    plan["overhead_ms"] = plan["wall_ms"] - plan["server_ms"]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return json.loads(json.dumps({"name": name, "import_ms": import_ms, "peak_rss_mb": peak_mb,
                                  "runaway": runaway, "plan": plan}))


if __name__ == "__main__":
    import json as _json

    print(_json.dumps(main(sys.argv[1:])))
