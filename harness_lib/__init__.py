"""Companion harness for "Build an agent harness: the loop and its five exits"."""

__version__ = "0.1.0"
