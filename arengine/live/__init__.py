"""Live streams: audio that arrives as it is recorded, tagged segment by segment.

A live stream is recognised by the same engine as an upload still arriving
(`arengine/audio/arrival.py`): its raw PCM is spooled as an open-ended WAV (`spool`) and the job
reads each segment as soon as its bytes are there, with shorter segments (`plans`) so that a
tag comes soon after its sound ends. `arengine/http/listen.py` is the WebSocket endpoint.
May import: audio, engine (its hooks), errors, kinds, postprocess, settings, types.
"""
