"""What a live stream may carry, declared once for the server, the client and the command.

Raw PCM says its rate and channels in the opening message; a container stream states its own
and is decoded on the server by a child process per stream.
"""

PCM_FORMATS: dict[str, tuple[int, int]] = {"s16le": (1, 2), "f32le": (3, 4)}
"""Raw PCM a stream may carry: its WAV format tag and bytes per sample."""

CONTAINER_FORMATS: dict[str, str] = {"webm": "matroska", "ogg": "ogg"}
"""Container streams (a browser's MediaRecorder chunks: WebM; Ogg), and the FFmpeg demuxer of
each. Their codec is Opus or Vorbis (the server's `arengine.live.decoder.DECODERS`)."""

FORMATS = (*PCM_FORMATS, *CONTAINER_FORMATS)
"""Every `format` an opening message may name."""

MAX_SOURCE_CHARS = 64
"""The longest source name (`?source=`)."""

SOURCE_NAME = rf"[a-z0-9][a-z0-9_-]{{0,{MAX_SOURCE_CHARS - 1}}}"
"""A source name: a short slug, safe in tags, logs, MQTT topics and metric labels alike. The
server checks `?source=` against it, and `arengine listen --sources` checks each name of a
sources file before anything connects."""

SOURCE_RULE = (
    f"1 to {MAX_SOURCE_CHARS} characters of lowercase letters a-z, digits, _ and -, starting "
    "with a letter or digit (kitchen, cam-2)"
)
"""`SOURCE_NAME` in words, for the errors of both sides."""
