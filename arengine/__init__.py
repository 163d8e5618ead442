"""arengine: a multi-threaded audio-recognition inference server."""

__version__ = "0.1.0"
