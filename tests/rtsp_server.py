"""A real RTSP server for the tests, as a camera serves its microphone: GStreamer's RTSP server
(Debian's `gir1.2-gst-rtsp-server-1.0`) sending a WAV recording as Opus over RTP, at real speed,
from its start to each client that connects.

Run by Debian's own Python (`/usr/bin/python3`, which has `python3-gi`), never the project's
venv: `python3 tests/rtsp_server.py PORT RECORDING.wav`. It prints `ready` once it listens on
127.0.0.1:PORT, path `/live`, and serves until it is killed. `tests/stream_server.py`'s
`RtspServer` starts it.
"""

from __future__ import annotations

import sys
from typing import Any


def main(port: str, recording: str) -> None:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    server: Any = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory: Any = GstRtspServer.RTSPMediaFactory()
    # Opus at 48 kHz in 20-ms packets, as IP cameras and doorbells send audio; each client gets
    # its own pipeline (the factory is not shared), so each hears the recording from its start.
    factory.set_launch(
        f"( filesrc location={recording} ! wavparse ! audioconvert ! audioresample "
        "! audio/x-raw,rate=48000 ! opusenc frame-size=20 ! rtpopuspay name=pay0 pt=96 )"
    )
    server.get_mount_points().add_factory("/live", factory)
    if not server.attach(None):
        sys.exit(f"rtsp_server: cannot listen on 127.0.0.1:{port}")
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main(*sys.argv[1:3])
