"""`WS /v1/listen`: a live audio stream in, its tags out as each becomes final.

The client opens with a text message describing its audio (`arengine/live/spool.py`): raw PCM,
or a container stream such as a browser's MediaRecorder chunks (`{"format": "webm"}`, decoded by
a child process per stream, `arengine/live/decoder.py`); it sends binary messages of audio, and
ends with the text message `{"end": true}` (or by closing). Each
message the server sends is one line of the NDJSON stream of `POST /v1/recognize?format=ndjson`
(`arengine/http/streaming.py` writes both): a tag as soon as it is final, `{"progress": ...}`
about once a second, and at the end `{"summary": ...}` or `{"error": ...}`; then the server
closes, with 1000 after a summary, or `4000 + the error's HTTP status` with the error code as
the reason (4408 `listen_idle`, 4503 `too_many_listeners`, ...; `close_code`).

Back-pressure: the WebSocket protocol reads no further message until this handler has taken the
last one, and the handler takes none while the audio received runs `listen_buffer_s` ahead of
what every model has post-processed, so a client sending faster than real time is slowed to the
engine's pace by TCP; memory per stream is the engine's segments, never the backlog (spooled),
and for a container stream its decoder's process and pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError
from starlette.types import Message
from starlette.websockets import WebSocketDisconnect

from arengine.engine.request import EngineRequest
from arengine.errors import (
    ArengineError,
    BodyTimeout,
    Cancelled,
    ErrorCode,
    InsufficientStorage,
    InvalidInput,
    Overloaded,
)
from arengine.http.errors import problem_text
from arengine.http.schemas import ListenQuery
from arengine.http.streaming import TagFeed, lines, stop
from arengine.kinds.base import Overrides, Recognizer
from arengine.live.decoder import StreamDecoder
from arengine.live.sources import DEFAULT_SOURCE, SourceLabels, source_name
from arengine.live.spool import LiveSpool, StreamFormat, parse_message
from arengine.notify.mqtt import StreamNotice, notify
from arengine.service.engine import Engine
from arengine.settings import Settings
from arengine.system.metrics import Metrics

log = logging.getLogger(__name__)

router = APIRouter()

SUBPROTOCOL = "arengine"
"""The subprotocol the server names back to a client that offers it: a page must offer one to
send its API key as another (`arengine.http.auth.KEY_SUBPROTOCOL`), and a browser drops a
handshake whose answer names none of those it offered."""

CLOSE_BASE = 4000
"""A stream ended by an error closes with `CLOSE_BASE` plus the error's HTTP status."""

THROTTLE_POLL_S = 0.01
"""How often a stream held back by `listen_buffer_s` looks whether the engine caught up."""


_CODES = {code.value: code for code in ErrorCode}


def close_code(code: ErrorCode) -> int:
    """The WebSocket close code of a stream ended by `code`: 4408 for `listen_idle`."""
    return CLOSE_BASE + code.status


@router.websocket("/v1/listen")
async def listen(websocket: WebSocket) -> None:
    """Tag a live stream (see the module docstring for the protocol)."""
    offered = websocket.scope.get("subprotocols", ())
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    started = time.monotonic()
    engine: Engine = websocket.app.state.engine
    code, reason, audio_s = 1000, "", 0.0
    model = websocket.query_params.get("model", "")
    source = DEFAULT_SOURCE
    try:
        recognizers, overrides, gate = _checked(websocket, engine)
        source = source_name(websocket.query_params.get("source"))
        with engine.admission.listening_slot():
            fmt = StreamFormat.parse(
                await _opening(websocket, engine.settings),
                engine.settings.limits.max_channels,
                (engine.settings.limits.min_sample_rate, engine.settings.limits.max_sample_rate),
            )
            session = _Session(websocket, engine, fmt, started, source, gate)
            try:
                code, reason = await session.run(recognizers, overrides)
            finally:
                audio_s = session.spool.seconds
                session.spool.close()
    except (WebSocketDisconnect, OSError):  # OSError: a send to a connection already closed
        code, reason = 1001, "the client went away"
    except ArengineError as error:
        _refused(websocket, error)
        code, reason = close_code(error.code), error.code.value
        with contextlib.suppress(Exception):  # the client may be gone already
            await websocket.send_text(_error_line(error))
    except Exception:  # a fault of ours still ends the stream with its line and its code
        request_id = websocket.scope.get("state", {}).get("request_id")
        log.exception("a live stream failed", extra={"fields": {"request_id": request_id}})
        fault = _fault(request_id)
        code, reason = close_code(fault.code), fault.code.value
        with contextlib.suppress(Exception):
            await websocket.send_text(_error_line(fault))
    with contextlib.suppress(Exception):
        await websocket.close(code, reason)
    log.info(
        "listen",
        extra={
            "fields": {
                "request_id": websocket.scope.get("state", {}).get("request_id"),
                "path": websocket.url.path,
                "model": model,
                "source": source,
                "close_code": code,
                "audio_s": round(audio_s, 3),
                "duration_s": round(time.monotonic() - started, 6),
            }
        },
    )


def _checked(
    websocket: WebSocket, engine: Engine
) -> tuple[tuple[Recognizer, ...], Overrides, str | None]:
    """The models, overrides and gate of the query, checked as a recognition's are."""
    params = websocket.query_params
    names = [name for name, _ in params.multi_items()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidInput(
            f"{', '.join(repeated)} given more than once; give each parameter once",
            code=ErrorCode.INVALID_PARAMETER,
        )
    try:
        query = ListenQuery.model_validate(dict(params))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'query'}: {problem_text(e['msg'])}"
            for e in error.errors()
        )
        raise InvalidInput(problems, code=ErrorCode.INVALID_PARAMETER) from None
    overrides = query.overrides()
    return engine.check(query.model, overrides, query.gate), overrides, query.gate


async def _opening(websocket: WebSocket, settings: Settings) -> str:
    """The opening text message."""
    message = await _receive(websocket, settings.live.listen_idle_timeout_s)
    if message.get("text") is None:
        raise InvalidInput(
            'the stream must open with a text message such as {"format": "s16le", '
            '"sample_rate": 16000, "channels": 1}, before any audio',
            code=ErrorCode.INVALID_STREAM_MESSAGE,
        )
    text: str = message["text"]
    return text


async def _receive(websocket: WebSocket, idle_s: float) -> Message:
    """The next message; `WebSocketDisconnect` when the client closed, 408 `listen_idle` when
    nothing came for `idle_s`."""
    try:
        message: Message = await asyncio.wait_for(websocket.receive(), idle_s)
    except TimeoutError:
        raise BodyTimeout(
            f"the stream sent nothing for {idle_s:g} s (listen_idle_timeout_s)",
            code=ErrorCode.LISTEN_IDLE,
        ) from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    return message


class _Session:
    """One accepted stream: its spool, its recognition, a reader of audio and a sender of lines."""

    def __init__(
        self,
        websocket: WebSocket,
        engine: Engine,
        fmt: StreamFormat,
        started: float,
        source: str = DEFAULT_SOURCE,
        gate: str | None = None,
    ) -> None:
        self.websocket = websocket
        self.gate = gate
        """The loudness model whose quiet segments the models skip (`?gate=`), if any."""
        self.engine = engine
        self.settings = engine.settings
        self.metrics: Metrics = websocket.app.state.metrics
        self.format = fmt
        self.source = source
        """The stream's `?source=` (`arengine/live/sources.py`)."""
        self.notice: StreamNotice | None = None
        """What it tells the MQTT broker, when there is one (`arengine/notify/`)."""
        self.decoder: StreamDecoder | None = None
        self._pumped = asyncio.Event()
        """The decoder's output is all spooled (or it failed)."""
        max_frames = int(self.settings.live.listen_max_duration_s * fmt.sample_rate)
        try:
            self.spool = LiveSpool.create(self.settings.server.upload_dir, fmt.spooled, max_frames)
        except OSError as error:
            raise _unstored(error) from None
        # A stream may take twice its longest duration in wall time (it may come slower than
        # real time), and no more: the deadline of its recognition.
        self.deadline = started + 2 * self.settings.live.listen_max_duration_s
        self.deadline += self.settings.live.listen_idle_timeout_s

    async def run(
        self, recognizers: tuple[Recognizer, ...], overrides: Overrides
    ) -> tuple[int, str]:
        """Stream until the end; the close code and reason."""
        if self.format.container:
            try:
                self.decoder = await StreamDecoder.start(self.format.format)
            except OSError as error:
                raise Overloaded(f"the stream's decoder could not start: {error}") from None
        try:
            return await self._run(recognizers, overrides)
        finally:
            if self.decoder is not None:
                await self.decoder.close()

    async def _run(
        self, recognizers: tuple[Recognizer, ...], overrides: Overrides
    ) -> tuple[int, str]:
        feed = _LiveFeed(self.spool)
        request_id: str = self.websocket.scope.get("state", {}).get("request_id", "listen")
        notice = self.notice = notify(self.websocket.app.state.mqtt, self.source, recognizers)
        opened = None if notice is None else notice.opened
        try:
            recognition = self.engine.listen(
                self.spool.arrival,
                recognizers,
                overrides,
                request_id,
                feed.listener(),
                opened,
                gate=self.gate,
            )
        except BaseException:
            if notice is not None:  # its source would stay online
                notice.close()
            raise
        feed.watch(recognition)
        single = recognizers[0].name if len(recognizers) == 1 else None
        tasks = [asyncio.ensure_future(self._read(recognition))]
        if self.decoder is not None:
            tasks.append(asyncio.ensure_future(self._pump(self.decoder, recognition)))
        for task in tasks:
            task.add_done_callback(functools.partial(_noticed, recognition, request_id))
        try:
            last = await self._send(feed, single)
        finally:
            if notice is not None:
                notice.close()
            for task in tasks:
                task.cancel()
            stop(recognition)
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        error = last.get("error")
        if error is not None:
            return close_code(_CODES[error["code"]]), error["code"]
        if self.spool.full:
            code = ErrorCode.LISTEN_TOO_LONG
            return close_code(code), code.value
        return 1000, ""

    async def _send(self, feed: TagFeed, single: str | None) -> dict[str, Any]:
        """Send every line of the stream; the last one."""
        last: dict[str, Any] = {}

        def finish(status: int, result: object) -> None:
            pass

        async for chunk in lines(feed, None, self.deadline, finish, progress=True):
            for line in chunk.decode().splitlines():
                last = json.loads(line)
                if "label" in last:
                    model = last.get("model") or single or ""
                    lag = self.spool.seconds - float(last["end"])
                    sources: SourceLabels = self.websocket.app.state.sources
                    self.metrics.observe_live_tag(
                        model, last["label"], lag, sources.of(self.source)
                    )
                    line = json.dumps({**last, "source": self.source})
                    if self.notice is not None:
                        self.notice.tagged(model, last)
                await self.websocket.send_text(line)
        return last

    async def _read(self, recognition: EngineRequest) -> None:
        """Spool the audio until the end message, the close or `listen_max_duration_s`; a
        failure ends the recognition with its error, which the sender's last line reports."""
        try:
            while not self.spool.full:
                await self._keep_pace(recognition)
                message = await _receive(self.websocket, self.settings.live.listen_idle_timeout_s)
                if message.get("bytes") is None:
                    if _ends(message.get("text")):
                        break
                elif self.decoder is not None:
                    await self.decoder.feed(message["bytes"])
                else:
                    self.spool.write(message["bytes"])
            if self.decoder is not None:
                await self.decoder.end()
                await self._pumped.wait()
        except WebSocketDisconnect:
            recognition.abort(Cancelled("the client closed the stream"))
            return
        except ArengineError as error:
            recognition.abort(error)
            return
        except OSError as error:  # the upload directory is full: the stream cannot go on
            recognition.abort(_unstored(error))
            return
        self.spool.end()

    async def _pump(self, decoder: StreamDecoder, recognition: EngineRequest) -> None:
        """Spool the decoder's PCM until it exits; its failure ends the recognition."""
        try:
            await decoder.pump(self.spool.write, lambda: self.spool.full)
            if self.spool.full:
                # The stream ends at its cap here, as a PCM stream's does in `_read`: its
                # recognition finishes, so its summary and its close follow. The child, whose
                # output nobody reads any more, would block writing it, then stop reading its
                # input, and the reader feeding it would wait for ever: it goes now.
                self.spool.end()
                await decoder.close()
        except ArengineError as error:
            recognition.abort(error)
        except OSError as error:  # the upload directory is full
            recognition.abort(_unstored(error))
        finally:
            self._pumped.set()

    async def _keep_pace(self, recognition: EngineRequest) -> None:
        """Wait while the audio received is `listen_buffer_s` ahead of recognition."""
        while (
            self.spool.seconds - recognition.processed_s > self.settings.live.listen_buffer_s
            and not recognition.future.done()
        ):
            await asyncio.sleep(THROTTLE_POLL_S)


class _LiveFeed(TagFeed):
    """The recognition's tags and progress; a progress line also says how much audio was
    received."""

    def __init__(self, spool: LiveSpool) -> None:
        super().__init__()
        self._spool = spool

    def progress(self) -> dict[str, Any]:
        line = super().progress()
        line["progress"]["received_s"] = round(self._spool.seconds, 3)
        return line


def _noticed(recognition: EngineRequest, request_id: str, task: asyncio.Future[None]) -> None:
    """A reading or decoding task that died of an unexpected error ends its stream (500, the
    cause logged): otherwise nothing reads the client any more, so the idle timeout no longer
    applies, and the stream would hold its slot and its spool until its deadline."""
    if task.cancelled() or task.exception() is None:
        return
    error = task.exception()
    log.error(
        "a live stream's task failed", exc_info=error, extra={"fields": {"request_id": request_id}}
    )
    recognition.abort(_fault(request_id))


def _fault(request_id: str | None) -> ArengineError:
    """A fault of the server's ending a stream (500): the cause goes to the log, not the client."""
    return ArengineError(
        f"the stream failed for request {request_id}; the server log has the cause",
        code=ErrorCode.INTERNAL_ERROR,
    )


def _unstored(error: OSError) -> InsufficientStorage:
    return InsufficientStorage(f"the stream could not be stored: {error.strerror or error}")


def _ends(text: str | None) -> bool:
    """Whether a text message is `{"end": true}`; `InvalidInput` for any other."""
    message = parse_message(text or "", "a text message after the opening")
    if message != {"end": True}:
        raise InvalidInput(
            'after the opening message a stream sends binary audio and ends with {"end": true}; '
            "no other text message",
            code=ErrorCode.INVALID_STREAM_MESSAGE,
        )
    return True


def _refused(websocket: WebSocket, error: ArengineError) -> None:
    """Count a stream refused before its recognition started, as a refused request is counted."""
    code = error.code
    if 400 <= code.status < 500 or code.status == 503:
        metrics: Metrics = websocket.app.state.metrics
        metrics.reject(code)


def _error_line(error: ArengineError) -> str:
    return json.dumps({"error": {"code": error.code, "message": error.message}})
