"""What a live stream may carry: declared once in the client distribution
(`arengine_client.live`), which the server, the client and the command share.

Raw PCM says its rate and channels in the opening message; a container stream states its own
and is decoded by a child process per stream (`decoder.py`).
"""

from arengine_client.live import CONTAINER_FORMATS, FORMATS, PCM_FORMATS

__all__ = ["CONTAINER_FORMATS", "FORMATS", "PCM_FORMATS"]
