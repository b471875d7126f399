"""The peer comparison: this harness beside the libraries a reader would pick instead.

    make bench            (python -m benchmarks; the peers need: pip install -e '.[bench]')

Lives beside the package, not inside it: the peer libraries are not dependencies of ``harness_lib``.
"""
