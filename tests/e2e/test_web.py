"""The browser page, driven in Debian's headless chromium against a real server.

Screenshots go to `$ARENGINE_SCREENSHOTS` when set (to look at them), else to the test's tmp dir.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
import soxr

from arengine.outputs.formats import FORMATS
from tests.conftest import RecordingFactory, Server, ServerFactory, wait_until
from tests.gate import Gate, gated_models, marked

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    # A fake microphone (a beep) that needs no permission prompt.
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="chromium is missing: deploy/setup.sh --test"
)

# Per column of a canvas: how many pixels are drawn (alpha > 0), and the mean red/green/blue.
COLUMNS = """(selector) => {
  const canvas = document.querySelector(selector);
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const inked = new Array(canvas.width).fill(0);
  for (let y = 0; y < canvas.height; y++)
    for (let x = 0; x < canvas.width; x++) if (data[(y * canvas.width + x) * 4 + 3]) inked[x]++;
  return {width: canvas.width, height: canvas.height, inked};
}"""
SPECTRUM_SPREAD = """() => {
  const canvas = document.querySelector('#spectrogram');
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const reds = new Set();
  for (let i = 0; i < data.length; i += 4 * 7) reds.add(data[i]);
  return reds.size;
}"""
BRIGHTNESS = """() => {
  const canvas = document.querySelector('#spectrogram');
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const red = new Array(canvas.width).fill(0);
  for (let i = 0; i < data.length; i += 4) red[(i / 4) % canvas.width] += data[i];
  return red;
}"""
VIEW = "() => ({...window.arengine.timeline.view, duration: window.arengine.timeline.duration})"


def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("ARENGINE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


@pytest.fixture(scope="module")
def page_server(serve: ServerFactory) -> Server:
    """Room for a 2-hour upload; one engine thread."""
    return serve("--engine-threads", "1")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _open(browser: Any, server: Server) -> Any:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(server.url + "/")
    page.wait_for_function("() => +document.body.dataset.models > 0")
    return page


def _run(page: Any, path: Path, models: list[str] | None = None, timeout_s: float = 180) -> None:
    if models is not None:
        for box in page.query_selector_all("#models input"):
            box.set_checked(box.get_attribute("value") in models)
    page.set_input_files("#file", str(path))
    page.evaluate("delete document.body.dataset.state")
    page.click("#run")
    page.wait_for_function(
        "() => ['done', 'failed'].includes(document.body.dataset.state)", timeout=timeout_s * 1000
    )


def _expected(server: Server, path: Path, model: str = "speech") -> dict[str, Any]:
    with path.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"model": model},
            files={"file": (path.name, body)},
            timeout=600,
        )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _track(page: Any, model: str) -> dict[str, Any]:
    columns: dict[str, Any] = page.evaluate(COLUMNS, f'.track[data-model="{model}"] canvas')
    return columns


def _assert_regions(
    track: dict[str, Any], tags: list[dict[str, Any]], start: float, end: float
) -> None:
    """Each tag's stretch of the track is filled top to bottom; the gaps between tags are empty."""
    width, height, inked = track["width"], track["height"], track["inked"]

    def column(t: float) -> int:
        return min(int((t - start) / (end - start) * width), int(width) - 1)

    visible = [t for t in tags if t["end"] > start and t["start"] < end]
    assert visible
    for tag in visible:
        middle = column((max(tag["start"], start) + min(tag["end"], end)) / 2)
        assert inked[middle] == height, (tag, middle)
    for before, after in itertools.pairwise(visible):
        gap = (column(before["end"]) + 2, column(after["start"]) - 2)
        if gap[1] > gap[0]:
            assert inked[(gap[0] + gap[1]) // 2] == 0, (before, after)
    drawn = sum(1 for count in inked if count)
    covered = sum(max(1, column(t["end"]) - column(t["start"]) + 1) for t in visible)
    assert drawn <= covered + 2 * len(visible)


def test_page_and_assets_are_served(server: Server) -> None:
    with server.client() as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        for name in ("app.js", "app.css"):
            assert f"/static/{name}" in page.text
        for name in ("app.js", "api.js", "timeline.js", "recorder.js", "app.css"):
            assert client.get(f"/static/{name}").status_code == 200
        app = client.get("/static/app.js").text
        for name in ("api.js", "timeline.js", "recorder.js"):
            assert f"./{name}" in app
        missing = client.get("/static/../settings.py")
        assert missing.status_code == 404
        assert client.get("/static/index.py").json()["error"]["code"] == "not_found"
        for asset in ("/", "/static/app.js", "/static/api.js", "/static/timeline.js"):
            text = client.get(asset).text
            assert "https://" not in text and "cdn" not in text.lower()


@pytest.fixture(scope="module")
def five_minutes(tmp_path_factory: pytest.TempPathFactory, phrases: Any) -> Path:
    """5 minutes at 16 kHz: a phrase every 30 s, a tone and noise in between."""
    from tests.recordings import compose, write

    folder = tmp_path_factory.mktemp("five")
    pieces = [("silence", 12.0), ("speech", 0), ("silence", 3.0), ("tone", 2.0), ("silence", 9.0)]
    audio, _ = compose(pieces * 10, 16000, folder, *phrases)
    return write(audio, 16000, folder / "five minutes.wav")


@pytest.fixture(scope="module")
def two_hours(tmp_path_factory: pytest.TempPathFactory, phrases: Any) -> Path:
    """2 hours at 8 kHz (110 MB of WAV, written block by block): a phrase every 5 minutes."""
    spoken, rate = phrases
    path = tmp_path_factory.mktemp("two") / "two hours.wav"
    phrase = [soxr.resample(p, rate, 8000).astype(np.float32) for p in spoken]
    with sf.SoundFile(path, "w", 8000, 1, "PCM_16") as out:
        for minute in range(0, 120, 5):
            block = np.zeros(5 * 60 * 8000, np.float32)
            words = phrase[(minute // 5) % len(phrase)]
            block[60 * 8000 : 60 * 8000 + len(words)] = words
            out.write(block)
    return path


@needs_chromium
def test_five_minutes_drawn_zoomed_and_played(
    page_server: Server, browser: Any, five_minutes: Path, tmp_path: Path
) -> None:
    result = _expected(page_server, five_minutes)
    expected, duration = result["tags"], result["audio"]["duration_s"]
    assert len(expected) == 10 and duration > 280
    page = _open(browser, page_server)
    checked = page.eval_on_selector_all("#models input:checked", "els => els.map(e => e.value)")
    assert checked == ["speech"], "the page opens on the server's default model"
    _run(page, five_minutes)
    view = page.evaluate(VIEW)
    assert view["start"] == 0 and view["end"] == pytest.approx(duration, abs=0.01)
    _assert_regions(_track(page, "speech"), expected, 0, view["end"])
    wave = page.evaluate(COLUMNS, "#wave")
    for tag in expected:  # speech draws a tall waveform; the silence before it a flat line
        middle = int((tag["start"] + tag["end"]) / 2 / duration * wave["width"])
        silent = int((tag["start"] - 3) / duration * wave["width"])
        assert wave["inked"][middle] > wave["height"] / 10 > wave["inked"][silent], tag
    assert page.evaluate(SPECTRUM_SPREAD) > 20, "the spectrogram is flat"
    assert page.locator("#tags tbody tr").count() == len(expected)
    assert page.inner_text("#status").startswith("10 tags")
    _shot(page, tmp_path, "five-minutes.png")

    # Zoom in twice around the cursor (at 0), then scroll to the middle.
    page.click("#zoom-in")
    page.click("#zoom-in")
    view = page.evaluate(VIEW)
    assert view["end"] - view["start"] == pytest.approx(duration / 4, abs=0.01)
    _assert_regions(_track(page, "speech"), expected, view["start"], view["end"])
    page.eval_on_selector("#scroll", "e => { e.value = 500; e.dispatchEvent(new Event('input')); }")
    view = page.evaluate(VIEW)
    assert view["start"] == pytest.approx(duration * 3 / 8, abs=0.5)
    _assert_regions(_track(page, "speech"), expected, view["start"], view["end"])
    page.mouse.move(600, page.eval_on_selector("#wave", "e => e.getBoundingClientRect().y + 20"))
    page.mouse.wheel(0, -300)  # wheel up: zoom in around the pointer
    zoomed = page.evaluate(VIEW)
    assert zoomed["end"] - zoomed["start"] < duration / 4
    _shot(page, tmp_path, "five-minutes-zoomed.png")

    # A click on a row plays that tag's stretch and stops at its end.
    page.click("#zoom-fit")
    third = expected[2]
    page.click("#tags tbody tr:nth-child(3)")
    page.wait_for_function("() => !window.arengine.player.paused")
    position = page.evaluate("window.arengine.player.currentTime")
    assert third["start"] - 0.05 <= position <= third["end"]
    cursor = float(page.get_attribute("#cursor", "data-time") or -1)
    assert third["start"] - 0.05 <= cursor <= third["end"]
    page.wait_for_function("() => window.arengine.player.paused", timeout=30_000)
    assert page.evaluate("window.arengine.player.currentTime") == pytest.approx(
        third["end"], abs=0.1
    )
    # A click on a region in the track plays that one.
    fifth = expected[4]
    box = page.eval_on_selector(
        '.track[data-model="speech"] canvas',
        "e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width}; }",
    )
    x = box["x"] + (fifth["start"] + fifth["end"]) / 2 / duration * box["w"]
    page.mouse.click(x, box["y"] + 10)
    assert page.evaluate("document.body.dataset.playing") == f"{fifth['start']}-{fifth['end']}"
    position = page.evaluate("window.arengine.player.currentTime")
    assert fifth["start"] - 0.05 <= position <= fifth["end"]

    # The tags the page holds are written by POST /v1/render: the recording is not sent again.
    with (
        page.expect_request(lambda r: "/v1/recognize" in r.url or "/v1/render" in r.url) as sent,
        page.expect_download() as started,
    ):
        page.select_option('#downloads select[data-model="speech"]', "textgrid")
        page.click('#downloads button[data-model="speech"]')
    assert "/v1/render?format=textgrid" in sent.value.url
    saved = tmp_path / started.value.suggested_filename
    assert saved.name == "five minutes.TextGrid"
    started.value.save_as(saved)
    tags = FORMATS["textgrid"].parse(saved.read_text())
    assert [(t.start, t.end) for t in tags] == [(t["start"], t["end"]) for t in expected]
    page.close()


@needs_chromium
def test_two_hours_drawn_whole(
    page_server: Server, browser: Any, two_hours: Path, tmp_path: Path
) -> None:
    page = _open(browser, page_server)
    _run(page, two_hours, ["speech"], timeout_s=400)
    tags = page.evaluate("window.arengine.state.tagsByModel.get('speech')")
    # Each phrase (a pause inside may split it) 60 s into each 5 minutes, and nothing else.
    assert {int(t["start"] // 300) for t in tags} == set(range(24))
    stray = [t for t in tags if not 59.5 <= t["start"] % 300 < t["end"] % 300 <= 70]
    assert not stray
    view = page.evaluate(VIEW)
    assert view["end"] == pytest.approx(7200, abs=1)
    _assert_regions(_track(page, "speech"), tags, 0, 7200)
    assert page.evaluate(SPECTRUM_SPREAD) > 5
    # Every phrase shows in the spectrogram, though a column spans 7 s and a phrase 2 to 4 s:
    # the column at each tag is brighter than the quiet columns beside it.
    bright = page.evaluate(BRIGHTNESS)
    for tag in tags:
        column = int((tag["start"] + tag["end"]) / 2 / 7200 * len(bright))
        assert bright[column] > 2 * bright[column - 10], tag
    _shot(page, tmp_path, "two-hours.png")
    page.close()


@pytest.fixture(scope="module")
def gated_page_server(
    serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Server, Gate]:
    """One engine thread and 2-s segments, serving `speech` and the `gate` test model, which
    holds a job in the engine until the test opens its gate."""
    models, gate = gated_models(tmp_path_factory.mktemp("gated"))
    return serve("--engine-threads", "1", "--segment-s", "2", "--models-dir", str(models)), gate


@needs_chromium
def test_cancel_stops_the_job_on_the_server(
    gated_page_server: tuple[Server, Gate], browser: Any, tmp_path: Path
) -> None:
    server, gate = gated_page_server
    # Two segments, then one held at the gate: running, with progress, until the cancel.
    held = marked(tmp_path / "held.wav", [("quiet", 4.0), ("mark", 1.0), ("quiet", 4.0)])
    page = _open(browser, server)
    for box in page.query_selector_all("#models input"):
        box.set_checked(box.get_attribute("value") == "gate")
    with gate.held(), server.client() as client:
        page.set_input_files("#file", str(held))
        page.click("#run")
        page.wait_for_function(
            "() => +document.querySelector('#progress').value > 0", timeout=120_000
        )
        assert client.get("/v1/info").json()["active_jobs"] == 1
        page.click("#cancel")
        page.wait_for_selector("body[data-state=cancelled]")
    with server.client() as client:

        def settled() -> bool:
            """The cancelled job dropped its remaining work once its running task let go, and
            the request's end is counted (its slot is freed a moment before)."""
            info = client.get("/v1/info").json()
            metrics = client.get("/metrics").text
            return (info["active_jobs"], info["pending_requests"]) == (0, 0) and all(
                line in metrics.splitlines()
                for line in (
                    "arengine_inflight_requests 0.0",
                    'arengine_requests_total{model="gate",status="499"} 1.0',
                )
            )

        assert wait_until(settled), client.get("/metrics").text
    assert page.inner_text("#status").startswith("Cancelled")
    page.close()


@needs_chromium
def test_two_models_get_a_track_each(
    server: Server, browser: Any, recording: RecordingFactory, tmp_path: Path
) -> None:
    clip = recording("both.wav")
    page = _open(browser, server)
    page.evaluate(SPY)
    _run(page, clip.path, ["speech", "pitch"])
    (sent,) = page.evaluate("window.sent")  # one upload for both models, decoded once
    assert "model=pitch%2Cspeech" in sent["url"], sent["url"]
    tracks = page.eval_on_selector_all(".track", "els => els.map(e => e.dataset.model)")
    assert tracks == ["pitch", "speech"]  # in the models' order
    for model in ("speech", "pitch"):
        expected = _expected(server, clip.path, model)
        tags = page.evaluate(f"window.arengine.state.tagsByModel.get('{model}')")
        assert [(t["start"], t["label"]) for t in tags] == [
            (t["start"], t["label"]) for t in expected["tags"]
        ]
        assert tags, model
        _assert_regions(_track(page, model), tags, 0, expected["audio"]["duration_s"])
    starts = page.eval_on_selector_all(
        "#tags tbody tr", "rows => rows.map(r => Number(r.dataset.start))"
    )
    models = page.eval_on_selector_all("#tags tbody tr", "rows => rows.map(r => r.dataset.model)")
    assert starts == sorted(starts) and set(models) == {"speech", "pitch"}, "one timeline order"
    formats = page.eval_on_selector_all(
        '#downloads select[data-model="pitch"] option', "els => els.map(e => e.value)"
    )
    assert "midi" in formats
    speech_formats = page.eval_on_selector_all(
        '#downloads select[data-model="speech"] option', "els => els.map(e => e.value)"
    )
    assert "midi" not in speech_formats and "textgrid" in speech_formats
    with page.expect_download() as started:
        page.select_option('#downloads select[data-model="pitch"]', "midi")
        page.click('#downloads button[data-model="pitch"]')
    midi = FORMATS["midi"].parse(Path(started.value.path()).read_bytes())
    pitch_tags = page.evaluate("window.arengine.state.tagsByModel.get('pitch')")
    assert [t.label for t in midi] == [t["label"] for t in pitch_tags]
    _shot(page, tmp_path, "two-models.png")
    page.close()


# Records what the page hands to fetch: the network log has no body for a Blob upload.
SPY = """() => {
  window.sent = [];
  const fetch_ = window.fetch;
  window.fetch = async (url, init) => {
    if (init && init.body instanceof FormData) {
      const file = init.body.get('file');
      const bytes = new Uint8Array(await file.arrayBuffer());
      const text = new TextDecoder('latin1').decode(bytes.slice(0, 4096));
      window.sent.push({url: String(url), name: file.name, type: file.type, size: file.size,
                        head: Array.from(bytes.slice(0, 4)), opus: text.includes('OpusHead')});
    }
    return fetch_(url, init);
  };
}"""


@needs_chromium
def test_microphone_recording_is_sent_as_webm(server: Server, browser: Any) -> None:
    page = _open(browser, server)
    page.evaluate(SPY)
    page.click("#record")
    page.wait_for_selector("#stop-recording:not([hidden])")
    page.wait_for_function("() => document.querySelector('#mic-time').textContent >= '0:01.5'")
    with page.expect_response(lambda r: "/v1/recognize" in r.url) as answered:
        page.click("#stop-recording")
    (sent,) = page.evaluate("window.sent")
    assert "model=speech" in sent["url"]
    assert sent["type"].startswith("audio/webm") and sent["name"].endswith(".webm")
    assert sent["head"] == [0x1A, 0x45, 0xDF, 0xA3], "not WebM (EBML)"
    assert sent["opus"], "the WebM does not carry Opus"
    assert sent["size"] > 5_000  # 1.5 s of Opus
    response = answered.value
    assert "multipart/form-data" in (response.request.headers.get("content-type") or "")
    page.wait_for_function("() => ['done', 'failed'].includes(document.body.dataset.state)")
    # Until the server decodes WebM (FFmpeg), it answers 415 and the page says so.
    if response.status == 415:
        assert "unsupported_format" in page.inner_text("#status")
        assert page.evaluate("document.body.dataset.state") == "failed"
    else:
        assert response.status == 200
        assert page.evaluate("document.body.dataset.state") == "done"
    page.close()


@needs_chromium
def test_api_key_is_kept_for_the_session_only(
    serve: ServerFactory, browser: Any, recording: RecordingFactory
) -> None:
    guarded = serve("--models", "speech", env={"ARENGINE_API_KEYS": "k-one,k-two"})
    page = browser.new_page()
    page.goto(guarded.url + "/")
    page.wait_for_selector("#status.error")
    assert "API key" in page.inner_text("#status")
    page.fill("#key", "k-two")
    page.dispatch_event("#key", "change")
    page.wait_for_function("() => +document.body.dataset.models > 0")
    assert page.evaluate("sessionStorage.getItem('arengine.apiKey')") == "k-two"
    assert page.evaluate("localStorage.length") == 0
    assert page.evaluate("document.cookie") == ""
    _run(page, recording("key.wav").path, ["speech"])
    assert page.evaluate("document.body.dataset.state") == "done"
    assert page.locator("#tags tbody tr").count() == 2
    page.reload()  # same tab: still there
    assert page.input_value("#key") == "k-two"
    page.close()
    fresh = browser.new_context().new_page()  # a new session: gone
    fresh.goto(guarded.url + "/")
    fresh.wait_for_selector("#status.error")
    assert fresh.input_value("#key") == ""
    fresh.close()


@needs_chromium
def test_an_events_profile_is_chosen_on_the_page(
    server: Server, browser: Any, tmp_path: Path
) -> None:
    """speech and events, events with its `ambient` profile: speech is left to speech."""
    from tests.recordings import DEBIAN_SOUNDS, mono_16k, write

    voice = mono_16k(DEBIAN_SOUNDS / "alsa/Front_Center.wav")
    ring = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/phone-incoming-call.oga")
    audio = np.concatenate([ring, np.zeros(8000, np.float32), voice, np.zeros(8000, np.float32)])
    path = write(audio, 16000, tmp_path / "ring-and-voice.wav")
    page = _open(browser, server)
    profiles = page.eval_on_selector_all(
        'select[data-profile-for="events"] option', "els => els.map(e => e.value)"
    )
    assert profiles == ["", "safety", "wildlife", "ambient"]
    page.select_option('select[data-profile-for="events"]', "ambient")
    page.evaluate(SPY)
    _run(page, path, ["speech", "events"])
    (sent,) = page.evaluate("window.sent")
    assert "profile=ambient" in sent["url"], sent["url"]
    events = page.evaluate("window.arengine.state.tagsByModel.get('events')")
    speech = page.evaluate("window.arengine.state.tagsByModel.get('speech')")
    assert speech and "Telephone bell ringing" in {t["label"] for t in events}
    assert "Speech" not in {t["label"] for t in events}
    page.close()


# Whether the pixel at each (x, y), in canvas pixels, is drawn.
INKED_AT = """([selector, points]) => {
  const canvas = document.querySelector(selector);
  const draw = canvas.getContext('2d');
  return points.map(([x, y]) => draw.getImageData(x, y, 1, 1).data[3] > 0);
}"""


@needs_chromium
def test_an_events_track_has_a_lane_per_label(server: Server, browser: Any, tmp_path: Path) -> None:
    """Events of several classes at once were drawn over each other in one strip."""
    from tests.recordings import DEBIAN_SOUNDS, mono_16k, write

    voice = mono_16k(DEBIAN_SOUNDS / "alsa/Front_Center.wav")
    ring = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/phone-incoming-call.oga")
    audio = np.concatenate([ring, np.zeros(8000, np.float32), voice, np.zeros(8000, np.float32)])
    path = write(audio, 16000, tmp_path / "ring-and-voice.wav")
    page = _open(browser, server)
    _run(page, path, ["speech", "events"])
    tags = page.evaluate("window.arengine.state.tagsByModel.get('events')")
    labels = list(dict.fromkeys(tag["label"] for tag in tags))  # in the order they came
    assert {"Telephone bell ringing", "Speech"} <= set(labels)
    lanes = page.eval_on_selector_all(
        '.track[data-model="events"] .lanes li', "items => items.map(i => i.textContent)"
    )
    order = page.evaluate(
        "window.arengine.state.models.find(m => m.name === 'events').labels"
    )  # AudioSet's class map, which follows the ontology: related classes side by side
    assert lanes == sorted(labels[:12], key=order.index) + (["other labels"] * (len(labels) > 12))
    assert lanes.index("Ringtone") == lanes.index("Telephone bell ringing") + 1
    assert page.eval_on_selector_all('.track[data-model="speech"] .lanes li', "i => i.length") == 0
    selector = '.track[data-model="events"] canvas'
    track = _track(page, "events")
    rows = len(lanes) + 1
    assert track["height"] == rows * 18  # an overview lane, then one per label
    lane_px = track["height"] // rows
    duration = page.evaluate("window.arengine.timeline.duration")
    ring_tag = next(tag for tag in tags if tag["label"] == "Telephone bell ringing")
    middle = (ring_tag["start"] + ring_tag["end"]) / 2
    x = min(int(middle / duration * track["width"]), track["width"] - 1)
    others = {
        lanes.index(tag["label"])
        for tag in tags
        if tag["label"] in lanes and tag["start"] <= middle <= tag["end"]
    }
    points = [[x, lane_px * (1 + lane) + lane_px // 2] for lane in range(len(lanes))]
    inked = page.evaluate(INKED_AT, [selector, [[x, lane_px // 2], *points]])
    assert inked[0], "the overview lane"
    assert [lane for lane, drawn in enumerate(inked[1:]) if drawn] == sorted(others)
    assert lanes.index("Telephone bell ringing") in others
    box = page.query_selector(selector).bounding_box()
    lane_y = box["y"] + (1 + lanes.index("Telephone bell ringing") + 0.5) * 18
    page.mouse.click(box["x"] + middle / duration * box["width"], lane_y)
    page.wait_for_function(  # JS writes the numbers as the page does
        "([start, end]) => document.body.dataset.playing === `${start}-${end}`",
        arg=[ring_tag["start"], ring_tag["end"]],
    )
    _shot(page, tmp_path, "events-lanes.png")
    page.close()
