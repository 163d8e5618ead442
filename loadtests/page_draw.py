"""What the page's timeline costs in Chromium: the one decode, then a redraw (waveform,
spectrogram, ruler, tracks) of the whole recording and of a one-minute window.

    python -m loadtests.page_draw loadtests/out/5min.wav loadtests/out/2h.wav

Starts a real `arengine serve` on 127.0.0.1 for the page's files only (nothing is recognized),
drives Debian's headless chromium, and prints one row per file: its size, the decode rate the page
picks, the decode time, and the median of five redraws at each zoom.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from loadtests.server import start_server

MEASURE = """async (zoom) => {
  const file = document.querySelector('#file').files[0];
  const rate = file.size > 50 * 1024 * 1024 ? 8000 : 22050;  // as app.js picks
  let began = performance.now();
  const audio = await new OfflineAudioContext(1, 1, rate).decodeAudioData(await file.arrayBuffer());
  const decode = performance.now() - began;
  const timeline = window.arengine.timeline;
  document.querySelector('#view').hidden = false;
  began = performance.now();
  timeline.reset(audio.duration, audio);
  const summary = performance.now() - began;
  const times = (start, end) => [...Array(5)].map(() => {
    const t = performance.now(); timeline.show(start, end); return performance.now() - t; });
  const whole = times(0, audio.duration);
  const minute = times(audio.duration / 2, audio.duration / 2 + 60);
  return {rate, seconds: audio.duration, decode, summary, whole, minute};
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    process, url = start_server(args.port)
    print("| file | MB | decoded at | audio | decode | summary | redraw whole | redraw 1 min |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
            )
            for path in args.files:
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.goto(url + "/")
                page.set_input_files("#file", str(path))
                got = page.evaluate(MEASURE)
                whole, minute = statistics.median(got["whole"]), statistics.median(got["minute"])
                print(
                    f"| {path.name} | {path.stat().st_size / 2**20:.0f} | {got['rate']} Hz "
                    f"| {got['seconds'] / 60:.0f} min | {got['decode']:.0f} ms "
                    f"| {got['summary']:.0f} ms | {whole:.0f} ms | {minute:.0f} ms |"
                )
                page.close()
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
