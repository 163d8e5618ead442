"""The client distribution alone: a fresh virtual environment with only `pip install ./client`
(httpx and websockets; pip may take them from the machine's cache and index) talks to a real
server on 127.0.0.1: `arengine recognize --server`, a job, `listen`; and it has no torch.

A client user had to `pip install arengine`, and with it torch 2.13.0, to send a file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from arengine.outputs.formats import FORMATS
from arengine.types import result_of
from tests.conftest import RecordingFactory, Server, ServerFactory

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fresh environment's folder, with `pip install ./client` done in it."""
    where = tmp_path_factory.mktemp("client-alone")
    source = where / "source"  # a copy: pip builds in the folder it is given
    shutil.copytree(
        ROOT / "client", source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    )
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", str(source)], check=True, timeout=600, env=_clean())
    return venv


def _clean() -> dict[str, str]:
    """This environment without a trace of the checkout (no PYTHONPATH to its arengine)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ARENGINE_", "COV"))}


def _run(
    venv: Path, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=cwd,
        env={**_clean(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def jobs_server(serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("alone-data")
    yield serve("--models", "speech", "--segment-s", "2", "--data-dir", str(data))


def test_the_client_alone_has_no_torch_and_no_engine(alone: Path, tmp_path: Path) -> None:
    for module in ("torch", "numpy", "soundfile", "arengine"):
        imported = _run(alone, "python", "-c", f"import {module}", cwd=tmp_path)
        assert imported.returncode == 1 and "ModuleNotFoundError" in imported.stderr, module
    refused = _run(alone, "arengine", "serve", "--port", "8123", cwd=tmp_path)
    assert refused.returncode == 2
    assert "needs the full arengine package" in refused.stderr


def test_recognize_through_the_server_writes_what_arengine_writes(
    alone: Path, jobs_server: Server, recording: RecordingFactory, tmp_path: Path
) -> None:
    talk = recording("talk.wav")
    done = _run(
        alone, "arengine", "recognize", "--server", jobs_server.url, str(talk.path),
        "--format", "csv", "--out", "out", "--threshold", "0.5",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with jobs_server.client() as raw, talk.path.open("rb") as handle:
        answer = raw.post("/v1/recognize", params={"threshold": 0.5}, files={"file": handle})
    result = result_of(answer.json())
    assert len(result.tags) == len(talk.speech) == 2
    written = (tmp_path / "out" / "talk.csv").read_bytes()
    assert written == FORMATS["csv"].encode(result, "talk")  # arengine's own writer, here

    # Over --job-over-s (its length from the WAV header, by the standard library): a job.
    as_job = _run(
        alone, "arengine", "recognize", "--server", jobs_server.url, str(talk.path),
        "--out", "jobs", "--job-over-s", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert as_job.returncode == 0, as_job.stderr
    kept = json.loads((tmp_path / "jobs" / "talk.json").read_text())
    assert [tag["label"] for tag in kept["tags"]] == ["speech", "speech"]
    with jobs_server.client() as raw:
        listed = raw.get("/v1/jobs").json()
    assert listed["jobs"], "the recording went as a job"

    unknown = _run(
        alone, "arengine", "recognize", "--server", jobs_server.url, str(talk.path),
        "--format", "nope", cwd=tmp_path,
    )  # fmt: skip
    assert unknown.returncode == 2 and "csv" in unknown.stderr  # names the server's formats


JOB_AND_LISTEN = """
import sys
import wave
from arengine_client import Client

url, path = sys.argv[1], sys.argv[2]
with Client(url) as client:
    job = client.submit(path)
    result = client.wait(job, poll_s=0.1)
    print(len(result.tags), client.job(job)["state"])
    with wave.open(path, "rb") as audio:  # 16-bit mono PCM at 16 kHz
        chunks = iter(lambda: audio.readframes(1600), b"")
        print(len(list(client.listen(chunks, sample_rate=16000))))
"""


def test_a_job_and_a_live_stream_through_the_blocking_client(
    alone: Path, jobs_server: Server, recording: RecordingFactory, tmp_path: Path
) -> None:
    talk = recording("talk.wav")
    ran = _run(alone, "python", "-c", JOB_AND_LISTEN, jobs_server.url, str(talk.path), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["2", "done", "2"]


def test_listen_sends_a_wav_without_soundfile(
    alone: Path, jobs_server: Server, recording: RecordingFactory, tmp_path: Path
) -> None:
    talk = recording("talk.wav")
    heard = _run(
        alone, "arengine", "listen", "--server", jobs_server.url, str(talk.path), cwd=tmp_path
    )
    assert heard.returncode == 0, heard.stderr
    lines = [json.loads(line) for line in heard.stdout.splitlines()]
    assert [line["label"] for line in lines if "label" in line] == ["speech", "speech"]
    assert "summary" in lines[-1]


def test_listen_sources_without_pyav_says_how_to_install_it(alone: Path, tmp_path: Path) -> None:
    """PyAV is the extra `arengine-client[sources]`: the client alone stays without FFmpeg's
    libraries, and `--sources` says what to install before it connects anywhere."""
    sources = tmp_path / "sources.toml"
    sources.write_text('[sources.hall]\nurl = "rtsp://127.0.0.1:9/stream"\n')
    ran = _run(
        alone, "arengine", "listen", "--server", "http://127.0.0.1:9", "--sources", str(sources),
        cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "pip install 'arengine-client[sources]'" in ran.stderr
    assert _run(alone, "python", "-c", "import av", cwd=tmp_path).returncode == 1
