"""arengine: a multi-threaded audio-recognition inference server."""

from importlib.metadata import version

__version__ = version("arengine")
"""Declared once, in pyproject.toml."""
