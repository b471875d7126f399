"""The peer comparison: this harness beside the libraries a reader would pick instead.

    make bench            (python -m benchmarks; the peers need: pip install -e '.[bench]')
    python -m benchmarks.provider     the scripted provider's own figures (serving the 100-turn runaway)

Lives beside the package, not inside it: the peer libraries are not dependencies of ``harness_lib``.
"""
