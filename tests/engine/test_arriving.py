"""A request started on a WAV's header: it decodes only audio that has arrived, without holding an
engine thread while it waits, and ends with the tags of the complete file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from arengine.engine.pool import EnginePool
from arengine.engine.request import RequestSpec
from arengine.errors import BodyTimeout, ErrorCode
from arengine.kinds.speech.network import SpeechModel
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.models.tagging import ModelTagging
from tests.arriving import Arriving
from tests.conftest import RecordingFactory, wait_until
from tests.engine.test_engine import LIMITS
from tests.recordings import Recording


def _spec(path: Path, recognizer: SpeechRecognizer) -> RequestSpec:
    return RequestSpec(
        "r", path, (recognizer,), ModelTagging((recognizer,), {}), LIMITS, segments_ahead=4
    )


def _long(recording: RecordingFactory) -> Recording:
    pieces = [p for i in range(12) for p in [("silence", 2.0 + i % 4), ("speech", 0), ("noise", 1)]]
    return recording("long.wav", rate=16000, pieces=pieces)


def test_a_job_decodes_what_has_arrived_with_no_thread_waiting_for_the_rest(
    speech_model: SpeechModel, recording: RecordingFactory, tmp_path: Path
) -> None:
    long = _long(recording)
    recognizer = SpeechRecognizer(speech_model, segment_s=5.0, preroll_s=1.0)
    pool = EnginePool(threads=2)
    try:
        expected = pool.submit(_spec(long.path, recognizer)).future.result(60)
        upload = Arriving(long.path, tmp_path / "arriving.wav")
        upload.start()
        upload.send(len(upload.data) // 2)
        arrived_s = (upload.sent - 44) / 2 / 16000
        request = pool.submit(
            dataclasses.replace(_spec(upload.target, recognizer), arrival=upload.arrival)
        )
        assert wait_until(lambda: request.progress[0] > 0)  # recognising before the upload ends
        # Then it stops where the bytes stop (it has asked for bytes not there, and holds no
        # segment: nothing is left to run), and no thread sits waiting for the rest.
        arrival = upload.arrival
        assert wait_until(lambda: arrival.refused > 0 and request.held_segments == 0)
        assert wait_until(lambda: pool.busy == 0)
        stalled_s = request.progress[0]
        idle, finished = pool.busy == 0, request.finished
        while upload.sent < len(upload.data):
            upload.send(50_000)
        upload.arrival.finish()
        result = request.future.result(60)
    finally:
        pool.close()
    assert idle and not finished
    assert 0 < stalled_s <= arrived_s
    assert result.tags == expected.tags
    assert result.audio == expected.audio


def test_an_upload_that_fails_fails_its_job_with_the_upload_error(
    speech_model: SpeechModel, recording: RecordingFactory, tmp_path: Path
) -> None:
    long = _long(recording)
    recognizer = SpeechRecognizer(speech_model, segment_s=5.0, preroll_s=1.0)
    upload = Arriving(long.path, tmp_path / "arriving.wav")
    upload.start()
    pool = EnginePool(threads=2)
    try:
        request = pool.submit(
            dataclasses.replace(_spec(upload.target, recognizer), arrival=upload.arrival)
        )
        # Validated on the header alone:
        assert wait_until(lambda: request.progress[1] is not None)
        upload.arrival.fail(BodyTimeout("no body data for 30 s"))
        error = request.future.exception(30)
        assert wait_until(lambda: pool.busy == 0 and pool.active_requests == 0)
    finally:
        pool.close()
    assert isinstance(error, BodyTimeout)
    assert error.code == ErrorCode.BODY_TIMEOUT
