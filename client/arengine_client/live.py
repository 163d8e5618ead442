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
