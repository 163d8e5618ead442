"""arengine: a multi-threaded audio-recognition inference server.

Each folder is a room whose `__init__` docstring says which rooms it may import (`May import:`);
the modules at the top are rooms of their own, with these rules: `types.py` and `settings.py`
import nothing of the package; `errors.py` may import settings; `client.py` may import live and
types (it needs no torch); `__main__.py` may import cli. `tests/test_layout.py` fails on an import
a room may not make and on any cycle between rooms, imports under `TYPE_CHECKING` and inside
functions included.
"""

from importlib.metadata import version

__version__ = version("arengine")
"""Declared once, in pyproject.toml."""
