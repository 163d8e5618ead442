"""The Python client, for programs that import it from here: it lives in the client distribution
(`arengine_client`, `pip install arengine-client`: httpx and websockets, no torch), which
`arengine` depends on.

Example (it needs a running server, so it is prose, not a doctest)::

    from arengine.client import Client  # the same class as arengine_client.Client

    with Client("http://127.0.0.1:8000") as client:
        print(client.recognize("talk.flac").tags)
"""

from arengine_client import (
    AsyncClient,
    Audio,
    AudioInfo,
    BadRequest,
    BodyTimeout,
    Client,
    DeadlineExceeded,
    Forbidden,
    InsufficientStorage,
    InvalidInput,
    JobFailed,
    NotFound,
    Recognition,
    RetryPolicy,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedFormat,
)
from arengine_client._shared import LISTEN_CLOSE_BASE, RETRY_STATUSES
from arengine_client.errors import error_of

__all__ = [
    "LISTEN_CLOSE_BASE",
    "RETRY_STATUSES",
    "AsyncClient",
    "Audio",
    "AudioInfo",
    "BadRequest",
    "BodyTimeout",
    "Client",
    "DeadlineExceeded",
    "Forbidden",
    "InsufficientStorage",
    "InvalidInput",
    "JobFailed",
    "NotFound",
    "Recognition",
    "RetryPolicy",
    "ServerError",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UnsupportedFormat",
    "error_of",
]
