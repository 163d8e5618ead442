"""`/v1/models/{name}/references` on real servers: administrator keys apart from users' keys,
uploads as for recognition, every refusal, and recognitions that see changes without a restart
while they run."""

from __future__ import annotations

import json
import re
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE, add_recording
from arengine.kinds.fingerprint.references import library_of
from arengine.models import DEFAULT_MODELS_DIR
from arengine.settings import MAX_METADATA_DEPTH
from tests.conftest import Server, ServerFactory
from tests.fingerprints import Placed, mix, piece
from tests.recordings import write

USER = {"Authorization": "Bearer user-key-1"}
ADMIN = {"Authorization": "Bearer admin-key-1"}
KEYS = {"ARENGINE_API_KEYS": "user-key-1", "ARENGINE_ADMIN_KEYS": "admin-key-1"}
JINGLES = "/v1/models/jingles/references"


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three FluidR3 pieces as FLAC (jingle0 is in the library from the start), a broadcast
    holding jingle0 at 2 s and jingle2 at 14.5 s, and a models folder of `jingles` and `speech`."""
    folder = tmp_path_factory.mktemp("material")
    pieces = [piece(seed, folder) for seed in range(3)]
    for i, samples in enumerate(pieces):
        write(samples, SAMPLE_RATE, folder / f"jingle{i}.flac")
    placed = [Placed(0, 2.0, 0.0, 10.0), Placed(2, 14.5, 0.0, 10.0)]
    write(mix(30.0, pieces, placed, snr_db=10.0), SAMPLE_RATE, folder / "broadcast.wav")
    return folder


@pytest.fixture(scope="module")
def models(material: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's models folder: `jingles` holding jingle0, and `speech`. Its servers share
    it, as servers on one host may; each test leaves `jingles` as it found it."""
    folder = tmp_path_factory.mktemp("models")
    library = library_of(folder / "jingles", create=True)
    samples = piece(0, tmp_path_factory.mktemp("piece"))
    add_recording(library, "jingle0", samples, {})
    (folder / "speech").mkdir()
    shutil.copy(DEFAULT_MODELS_DIR / "speech" / "manifest.toml", folder / "speech")
    return folder


@pytest.fixture
def keyed(models: Path, serve: ServerFactory) -> Server:
    return serve("--models-dir", str(models), "--segment-s", "10", "--max-duration-s", "60",
                env=KEYS)  # fmt: skip


def _labels(server: Server, material: Path, headers: dict[str, str]) -> list[str]:
    with server.client() as client:
        response = client.post(
            "/v1/recognize?model=jingles",
            files={"file": (material / "broadcast.wav").read_bytes()},
            headers=headers,
        )
    assert response.status_code == 200, response.text
    return [tag["label"] for tag in response.json()["tags"]]


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"]["code"] == code, body
    message: str = body["error"]["message"]
    return message


def _held(client: httpx.Client, model: str) -> float:
    """`arengine_model_held_bytes` of `model`, as Prometheus would scrape it."""
    text = client.get("/metrics", headers=USER).text
    found = re.search(rf'^arengine_model_held_bytes{{model="{model}"}} (\S+)$', text, re.M)
    assert found is not None, text
    return float(found.group(1))


def test_an_added_reference_is_found_and_a_removed_one_no_more(
    keyed: Server, material: Path
) -> None:
    assert _labels(keyed, material, USER) == ["jingle0"]
    with keyed.client() as client:
        held = _held(client, "jingles")  # the library in memory: 16 bytes a stored hash
        assert held > 0 and held % 16 == 0 and _held(client, "speech") == 0
        flac = (material / "jingle2.flac").read_bytes()
        added = client.post(JINGLES, files={"file": ("jingle2.flac", flac)}, headers=ADMIN)
        assert added.status_code == 201, added.text
        ref = added.json()
        assert (ref["title"], ref["metadata"]) == ("jingle2", {"file": "jingle2.flac"})
        assert abs(ref["duration_s"] - 10.0) <= 0.05
        assert added.headers["location"] == f"{JINGLES}/{ref['id']}"
        assert client.get(added.headers["location"], headers=USER).json() == ref
        listed = client.get(JINGLES, headers=USER).json()
        assert [r["title"] for r in listed["references"]] == ["jingle0", "jingle2"]
        assert _labels(keyed, material, USER) == ["jingle0", "jingle2"]
        assert _held(client, "jingles") > held  # the add reached the held library

        assert client.delete(f"{JINGLES}/{ref['id']}", headers=ADMIN).status_code == 204
        assert _labels(keyed, material, USER) == ["jingle0"]
        assert _held(client, "jingles") == held
        _error(client.delete(f"{JINGLES}/{ref['id']}", headers=ADMIN), 404, "reference_not_found")
        _error(client.get(f"{JINGLES}/{ref['id']}", headers=USER), 404, "reference_not_found")


def test_a_raw_body_with_a_title_and_metadata(keyed: Server, material: Path) -> None:
    with keyed.client() as client:
        added = client.post(
            JINGLES,
            params={"title": "Station ident", "metadata": '{"client": "acme", "spots": [1, 2]}'},
            content=(material / "jingle1.flac").read_bytes(),
            headers={**ADMIN, "Content-Type": "audio/flac"},
        )
        assert added.status_code == 201, added.text
        assert added.json()["metadata"] == {"client": "acme", "spots": [1, 2]}
        assert added.json()["title"] == "Station ident"
        assert client.delete(added.headers["location"], headers=ADMIN).status_code == 204


def test_writes_need_an_administrator_key(keyed: Server, material: Path) -> None:
    flac = {"file": ("jingle1.flac", (material / "jingle1.flac").read_bytes())}
    with keyed.client() as client:
        _error(client.post(JINGLES, files=flac, headers=USER), 403, "not_admin")
        _error(client.delete(f"{JINGLES}/1", headers=USER), 403, "not_admin")
        refused = client.post(JINGLES, files=flac)  # no key: the users' check answers first
        _error(refused, 401, "unauthorized")
        _error(client.get(JINGLES), 401, "unauthorized")
        bad = {"Authorization": "Bearer admin-key-2"}
        _error(client.post(JINGLES, files=flac, headers=bad), 401, "unauthorized")
        # An administrator may read and recognise as a user does.
        assert client.get(JINGLES, headers=ADMIN).status_code == 200
        assert [r["id"] for r in client.get(JINGLES, headers=USER).json()["references"]] == ["1"]
    assert _labels(keyed, material, ADMIN) == ["jingle0"]


def test_without_users_keys_an_administrator_key_is_still_needed(
    models: Path, serve: ServerFactory, material: Path
) -> None:
    server = serve("--models-dir", str(models), env={"ARENGINE_ADMIN_KEYS": "admin-key-1"})
    flac = {"file": ("jingle1.flac", (material / "jingle1.flac").read_bytes())}
    with server.client() as client:
        refused = client.post(JINGLES, files=flac)
        _error(refused, 401, "admin_required")
        assert refused.headers["www-authenticate"] == 'Bearer realm="arengine"'
        _error(client.post(JINGLES, files=flac, headers=USER), 403, "not_admin")
        assert client.get(JINGLES).status_code == 200
        added = client.post(JINGLES, files=flac, headers=ADMIN)
        assert added.status_code == 201, added.text
        assert client.delete(added.headers["location"], headers=ADMIN).status_code == 204


def test_with_no_administrator_keys_writes_are_off(
    models: Path, serve: ServerFactory, material: Path
) -> None:
    server = serve("--models-dir", str(models))
    with server.client() as client:
        flac = {"file": ("jingle1.flac", (material / "jingle1.flac").read_bytes())}
        message = _error(client.post(JINGLES, files=flac, headers=ADMIN), 403, "admin_disabled")
        assert "ARENGINE_ADMIN_KEYS" in message and "arengine references" in message
        _error(client.delete(f"{JINGLES}/1"), 403, "admin_disabled")
        assert [r["title"] for r in client.get(JINGLES).json()["references"]] == ["jingle0"]


def _nested(depth: int) -> str:
    """A JSON object nested `depth` levels deep, itself the first."""
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def test_metadata_nested_to_the_bound_is_kept(keyed: Server, material: Path) -> None:
    flac = {"file": ("j.flac", (material / "jingle1.flac").read_bytes())}
    deepest = _nested(MAX_METADATA_DEPTH)
    with keyed.client() as client:
        added = client.post(JINGLES, params={"metadata": deepest}, files=flac, headers=ADMIN)
        assert added.status_code == 201, added.text
        assert added.json()["metadata"] == {"file": "j.flac", **json.loads(deepest)}
        listed = client.get(JINGLES, headers=USER)
        assert listed.status_code == 200 and len(listed.json()["references"]) == 2
        assert client.delete(f"{JINGLES}/{added.json()['id']}", headers=ADMIN).status_code == 204


def _silence(folder: Path) -> bytes:
    return write(np.zeros(5 * SAMPLE_RATE, np.float32), SAMPLE_RATE, folder / "s.wav").read_bytes()


def _too_long(folder: Path) -> bytes:
    noise = np.random.default_rng(0).standard_normal(70 * 8000).astype(np.float32) * 0.1
    return write(noise, 8000, folder / "long.flac").read_bytes()


@pytest.mark.parametrize(
    ("path", "params", "upload", "status", "code"),
    [
        (JINGLES, {"metadata": "{not json"}, "flac", 422, "invalid_parameter"),
        (JINGLES, {"metadata": "[1, 2]"}, "flac", 422, "invalid_parameter"),
        (JINGLES, {"metadata": "x" * 5000}, "flac", 422, "invalid_parameter"),
        # Stored, 300 deep failed every later listing (500 for every user) and the add itself
        # answered 500 (a retry added it again); 1,500 deep was a 500 at once.
        (JINGLES, {"metadata": _nested(300)}, "flac", 422, "invalid_parameter"),
        (JINGLES, {"metadata": _nested(1500)}, "flac", 422, "invalid_parameter"),
        (JINGLES, {"metadata": _nested(MAX_METADATA_DEPTH + 1)}, "flac", 422, "invalid_parameter"),
        (JINGLES, {"title": "t" * 300}, "flac", 422, "invalid_parameter"),
        (JINGLES, {"title": ""}, "flac", 422, "invalid_parameter"),
        ("/v1/models/nowhere/references", {}, "flac", 404, "unknown_model"),
        ("/v1/models/speech/references", {}, "flac", 404, "not_a_library"),
        (JINGLES, {}, "silence", 422, "no_landmarks"),
        (JINGLES, {}, "corrupt", 400, "corrupt_audio"),
        (JINGLES, {}, "empty", 422, "empty_file"),
        (JINGLES, {}, "too_long", 413, "audio_too_long"),
        (JINGLES, {}, "text", 415, "unsupported_media_type"),
        (JINGLES, {}, "other_field", 422, "missing_file"),
    ],
)
def test_refused_uploads_say_why_and_add_nothing(
    keyed: Server,
    material: Path,
    tmp_path: Path,
    path: str,
    params: dict[str, str],
    upload: str,
    status: int,
    code: str,
) -> None:
    flac = (material / "jingle1.flac").read_bytes()
    bodies: dict[str, dict[str, Any]] = {
        "flac": {"files": {"file": ("j.flac", flac)}},
        "silence": {"files": {"file": ("s.wav", _silence(tmp_path))}},
        "corrupt": {"files": {"file": ("c.wav", b"RIFF\x00\x00\x00\x00WAVEfmt " + bytes(8))}},
        "empty": {"files": {"file": ("e.wav", b"")}},
        "too_long": {"files": {"file": ("long.flac", _too_long(tmp_path))}},
        "text": {"content": b"hello", "headers": {"Content-Type": "text/plain"}},
        "other_field": {"files": {"audio": ("j.flac", flac)}},
    }
    body = bodies[upload]
    headers = {**ADMIN, **body.pop("headers", {})}
    with keyed.client() as client:
        message = _error(client.post(path, params=params, headers=headers, **body), status, code)
        assert message
        listed = client.get(JINGLES, headers=USER).json()["references"]
    assert [r["title"] for r in listed] == ["jingle0"]
    assert list(keyed.upload_dir.iterdir()) == []  # the spooled upload is gone


def test_an_upload_over_the_byte_cap_is_refused_before_it_is_read(keyed: Server) -> None:
    """The declared length is over `max_upload_bytes` (2 GiB): 413 with none of the body sent."""
    port = int(keyed.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            f"POST {JINGLES} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {ADMIN['Authorization']}"
            f"\r\nContent-Type: audio/flac\r\nContent-Length: {3 << 30}\r\n\r\n".encode()
        )
        answer = b""
        while b"}}" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
    text = answer.decode("latin-1")
    assert text.startswith("HTTP/1.1 413"), text
    assert '"code":"upload_too_large"' in text


def test_a_foreign_page_cannot_add(keyed: Server, material: Path) -> None:
    flac = {"file": ("j.flac", (material / "jingle1.flac").read_bytes())}
    headers = {**ADMIN, "Origin": "https://evil.example"}
    with keyed.client() as client:
        _error(client.post(JINGLES, files=flac, headers=headers), 403, "forbidden_origin")


@pytest.mark.parametrize("reference", ["abc", "-1", "\uff11", "9" * 40])
def test_unknown_reference_ids(keyed: Server, reference: str) -> None:
    with keyed.client() as client:
        _error(client.get(f"{JINGLES}/{reference}", headers=USER), 404, "reference_not_found")
        _error(client.delete(f"{JINGLES}/{reference}", headers=ADMIN), 404, "reference_not_found")


def test_recognitions_under_way_while_references_change(keyed: Server, material: Path) -> None:
    """Adds and removes while recognitions run: every recognition answers, always with jingle0
    (never changed) and with jingle2 only as present or absent, never a failure or a half."""
    outcomes: list[list[str]] = []
    stop = threading.Event()

    def recognise() -> None:
        while not stop.is_set():
            outcomes.append(_labels(keyed, material, USER))

    readers = [threading.Thread(target=recognise) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        flac = (material / "jingle2.flac").read_bytes()
        with keyed.client() as client:
            for _ in range(4):
                added = client.post(JINGLES, files={"file": ("jingle2.flac", flac)}, headers=ADMIN)
                assert added.status_code == 201, added.text
                removed = client.delete(f"{JINGLES}/{added.json()['id']}", headers=ADMIN)
                assert removed.status_code == 204
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert outcomes
    assert all(labels in (["jingle0"], ["jingle0", "jingle2"]) for labels in outcomes), outcomes
