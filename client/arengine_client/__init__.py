"""arengine's client: `Client`, `AsyncClient` and the remote commands, with httpx and websockets
only (no torch): `pip install arengine-client`.

Example (it needs a running server, so it is prose, not a doctest)::

    with Client("http://127.0.0.1:8000", api_key=os.environ.get("ARENGINE_API_KEY")) as client:
        result = client.recognize("talk.flac", model="speech", threshold=0.6)
        print([(tag.start, tag.end, tag.label) for tag in result.tags])

`AsyncClient` has the same methods as coroutines (`stream` and `listen` are async iterators);
`Client`'s are generated from them (`client/unasync.py`). Every error answer raises the class of
its status from `arengine_client.errors`, the hierarchy the server's own errors subclass.
"""

from importlib.metadata import PackageNotFoundError, version

from arengine_client._async import AsyncClient
from arengine_client._shared import Audio, Recognition, RetryPolicy
from arengine_client._sync import Client
from arengine_client.errors import (
    ArengineError,
    BadRequest,
    BodyTimeout,
    DeadlineExceeded,
    Forbidden,
    InsufficientStorage,
    InvalidInput,
    JobFailed,
    NotFound,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedFormat,
)
from arengine_client.types import AudioInfo, Extra, Result, Tag

try:
    __version__ = version("arengine-client")
    """arengine's own version: the two distributions are released together."""
except PackageNotFoundError:  # imported from a checkout that was not installed
    __version__ = "0+unknown"

__all__ = [
    "ArengineError",
    "AsyncClient",
    "Audio",
    "AudioInfo",
    "BadRequest",
    "BodyTimeout",
    "Client",
    "DeadlineExceeded",
    "Extra",
    "Forbidden",
    "InsufficientStorage",
    "InvalidInput",
    "JobFailed",
    "NotFound",
    "Recognition",
    "Result",
    "RetryPolicy",
    "ServerError",
    "Tag",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UnsupportedFormat",
]
