"""The browser page, driven in Debian's headless chromium against a real server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from arengine.formats import FORMATS
from tests.conftest import RecordingFactory, Server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INK = """() => {
  const canvas = document.querySelector('#canvas');
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let inked = 0;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i]) inked++;
  return inked;
}"""


def test_page_and_assets_are_served(server: Server) -> None:
    with server.client() as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        for name in ("app.js", "app.css"):
            assert f"/static/{name}" in page.text
            assert client.get(f"/static/{name}").status_code == 200
        missing = client.get("/static/../settings.py")
        assert missing.status_code == 404
        assert client.get("/static/index.py").json()["error"]["code"] == "not_found"
        assert "cdn" not in page.text.lower() and "https://" not in page.text


@pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium is missing: deploy/setup.sh --test")
def test_upload_draws_regions_and_downloads(
    server: Server, recording: RecordingFactory, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    clip = recording("meeting.wav")
    with clip.path.open("rb") as body:
        expected = httpx.post(
            server.url + "/v1/recognize", files={"file": ("meeting.wav", body)}, timeout=120
        ).json()
    assert len(expected["tags"]) == 2
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            page.goto(server.url + "/")
            page.wait_for_function("document.querySelectorAll('#model option').length > 0")
            page.select_option("#model", "speech")
            page.set_input_files("#file", str(clip.path))
            page.click("#run")
            page.wait_for_selector("body[data-done=true]", timeout=60_000)

            regions = page.eval_on_selector_all(
                ".region",
                "els => els.map(e => ({start: +e.dataset.start, end: +e.dataset.end,"
                " label: e.dataset.label, left: e.offsetLeft, width: e.offsetWidth,"
                " parent: e.parentElement.clientWidth}))",
            )
            assert len(regions) == len(expected["tags"])
            duration = expected["audio"]["duration_s"]
            for region, tag in zip(regions, expected["tags"], strict=True):
                assert region["start"] == pytest.approx(tag["start"], abs=1e-6)
                assert region["end"] == pytest.approx(tag["end"], abs=1e-6)
                assert region["label"] == tag["label"]
                scale = region["parent"] / duration
                assert region["left"] == pytest.approx(tag["start"] * scale, abs=2)
                # offsetWidth counts the 1 px borders
                assert region["width"] == pytest.approx((tag["end"] - tag["start"]) * scale, abs=3)
            assert page.locator("#tags tbody tr").count() == len(expected["tags"])
            assert page.evaluate(INK) > 1000, "the waveform was not drawn"
            assert "2 tags" in page.inner_text("#status")

            with page.expect_download() as started:
                page.click("#downloads button[data-format=csv]")
            download = started.value
            assert download.suggested_filename == "meeting.csv"
            saved = tmp_path / download.suggested_filename
            download.save_as(saved)
            tags = FORMATS["csv"].parse(saved.read_text())
            assert [(t.start, t.end) for t in tags] == [
                (t["start"], t["end"]) for t in expected["tags"]
            ]
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "page.png").stat().st_size > 10_000
