"""The page's Listen mode in Debian's headless chromium: a fake microphone that plays speech
(`--use-file-for-fake-audio-capture`), streamed over `WS /v1/listen` to a real server."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.conftest import Phrases, Server, ServerFactory, wait_until
from tests.e2e.test_web import (
    CHROMIUM,
    CHROMIUM_ARGS,
    SPECTRUM_SPREAD,
    _assert_regions,
    _open,
    _shot,
    _track,
    needs_chromium,
)
from tests.recordings import compose, write

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def speaking_mic(tmp_path_factory: pytest.TempPathFactory, phrases: Phrases) -> Path:
    """What the fake microphone plays, looped: two phrases between pauses (16-bit WAV, which
    is what chromium's fake capture reads)."""
    folder = tmp_path_factory.mktemp("mic")
    pieces = [("silence", 1.0), ("speech", 0), ("silence", 1.5), ("speech", 0), ("silence", 1.5)]
    audio, _ = compose(pieces, 16000, folder, *phrases)
    return write(audio, 16000, folder / "mic.wav")


@pytest.fixture(scope="module")
def browser(speaking_mic: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    args = [*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={speaking_mic}"]
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
        yield chromium
        chromium.close()


def _choose(page: Any, models: list[str]) -> None:
    for box in page.query_selector_all("#models input"):
        box.set_checked(box.get_attribute("value") in models)


@needs_chromium
def test_listening_fills_the_track_live(server: Server, browser: Any, tmp_path: Path) -> None:
    page = _open(browser, server)
    sockets: list[Any] = []
    page.on("websocket", lambda socket: sockets.append(socket))
    _choose(page, ["speech"])
    page.click("#listen")
    page.wait_for_selector("body[data-state=listening]")
    # Speech tags arrive while the microphone is still open, and are drawn on the track.
    page.wait_for_function(
        "() => (window.arengine.state.tagsByModel?.get('speech') || []).length >= 2", timeout=60_000
    )
    assert page.evaluate("document.body.dataset.state") == "listening"
    assert page.is_visible("#stop-listening") and not page.is_visible("#listen")
    page.wait_for_function("() => +document.querySelector('#progress').value > 0")
    assert "heard" in page.inner_text("#progress-text")
    tags = page.evaluate("window.arengine.state.tagsByModel.get('speech')")
    assert {tag["label"] for tag in tags} == {"speech"}
    duration = page.evaluate("window.arengine.timeline.duration")
    assert duration >= tags[-1]["end"]
    _assert_regions(_track(page, "speech"), tags, 0, duration)
    assert page.locator("#tags tbody tr").count() == len(tags)
    (socket,) = sockets
    assert "/v1/listen?model=speech" in socket.url

    page.click("#stop-listening")
    page.wait_for_function("() => document.body.dataset.state === 'done'", timeout=60_000)
    summary = page.evaluate("window.arengine.state.summary")
    heard = summary["audio"]["duration_s"]
    assert heard >= tags[-1]["end"]
    final = page.evaluate("window.arengine.state.tagsByModel.get('speech')")
    assert final[: len(tags)] == tags  # tags once sent are final
    assert page.evaluate("window.arengine.timeline.duration") == pytest.approx(heard, abs=0.01)
    assert page.is_visible("#listen") and not page.is_visible("#stop-listening")
    assert page.is_enabled("#run")
    assert page.inner_text("#status").startswith(f"{len(final)} tags")
    # The microphone is released and the socket closed.
    page.wait_for_function("() => !window.arengine.state.live")
    assert socket.is_closed()
    # What was heard is kept: drawn, and each tag plays from it.
    assert page.evaluate("window.arengine.state.file.name").startswith("microphone-")
    assert page.evaluate(SPECTRUM_SPREAD) > 5
    page.click("#tags tbody tr:nth-child(1)")
    page.wait_for_function("() => !window.arengine.player.paused")
    position = page.evaluate("window.arengine.player.currentTime")
    assert final[0]["start"] - 0.05 <= position <= final[0]["end"]
    _assert_regions(_track(page, "speech"), final, 0, heard)
    # The tags the page holds download as a file (POST /v1/render, nothing recorded is sent).
    with page.expect_download() as started:
        page.select_option('#downloads select[data-model="speech"]', "json")
        page.click('#downloads button[data-model="speech"]')
    assert started.value.suggested_filename.startswith("microphone-")
    _shot(page, tmp_path, "listening.png")
    page.close()


def _listen_with(server: Server, protocols: list[str]) -> tuple[str | None, list[dict[str, Any]]]:
    """A short stream of silence offering `protocols`: the subprotocol named back, the lines."""
    url = server.url.replace("http://", "ws://") + "/v1/listen?model=speech"
    opening = {"format": "s16le", "sample_rate": 16000, "channels": 1}
    with connect(url, subprotocols=protocols, open_timeout=30) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps(opening))
        ws.send(b"\0" * 32000)
        ws.send(json.dumps({"end": True}))
        lines = [json.loads(message) for message in ws]
        return ws.subprotocol, lines


def test_a_handshake_sends_its_key_as_a_subprotocol(serve: ServerFactory) -> None:
    """A page's WebSocket cannot send Authorization: it was always refused with keys on."""
    keyed = serve("--models", "speech", env={"ARENGINE_API_KEYS": "k-one,k/two+="})
    encoded = base64.urlsafe_b64encode(b"k/two+=").decode().rstrip("=")
    named, lines = _listen_with(keyed, ["arengine", f"arengine.key.{encoded}"])
    assert named == "arengine"  # never the key
    assert "summary" in lines[-1]
    wrong = base64.urlsafe_b64encode(b"k-three").decode().rstrip("=")
    for protocols in (["arengine", f"arengine.key.{wrong}"], ["arengine", "arengine.key.%%"]):
        with pytest.raises(InvalidStatus) as refused:
            _listen_with(keyed, protocols)
        assert refused.value.response.status_code == 401


@needs_chromium
def test_a_page_listens_with_its_api_key(serve: ServerFactory, browser: Any) -> None:
    keyed = serve("--models", "speech", env={"ARENGINE_API_KEYS": "k-one,k-two"})
    page = browser.new_page()
    page.goto(keyed.url + "/")
    page.fill("#key", "k-two")
    page.press("#key", "Tab")  # the field's change event: the page keeps the key, loads models
    page.wait_for_function("() => +document.body.dataset.models > 0")
    _choose(page, ["speech"])
    # A key the server does not know: the handshake is refused and the page says so.
    page.evaluate("sessionStorage.setItem('arengine.apiKey', 'k-wrong')")
    page.click("#listen")
    page.wait_for_function("() => document.body.dataset.state === 'failed'", timeout=60_000)
    assert "refused" in page.inner_text("#status")
    page.wait_for_function("() => !window.arengine.state.live")
    page.evaluate("sessionStorage.setItem('arengine.apiKey', 'k-two')")
    page.click("#listen")
    page.wait_for_function(
        "() => (window.arengine.state.tagsByModel?.get('speech') || []).length >= 1", timeout=60_000
    )
    page.click("#stop-listening")
    page.wait_for_function("() => document.body.dataset.state === 'done'", timeout=60_000)
    assert page.evaluate("window.arengine.state.summary.audio.duration_s") > 1
    page.close()


@needs_chromium
def test_cancel_while_listening_drops_the_stream(server: Server, browser: Any) -> None:
    page = _open(browser, server)
    _choose(page, ["speech"])
    page.click("#listen")
    page.wait_for_function(
        "() => (window.arengine.state.tagsByModel?.get('speech') || []).length >= 1", timeout=60_000
    )
    with server.client() as client:
        assert "arengine_live_streams 1.0" in client.get("/metrics").text
        page.click("#cancel")
        page.wait_for_function("() => document.body.dataset.state === 'cancelled'", timeout=30_000)
        assert wait_until(lambda: "arengine_live_streams 0.0" in client.get("/metrics").text)
    assert page.inner_text("#status").startswith("Cancelled")
    page.wait_for_function("() => !window.arengine.state.live")
    assert page.evaluate("window.arengine.state.summary") is None
    assert page.is_visible("#listen") and page.is_enabled("#listen")
    page.close()
