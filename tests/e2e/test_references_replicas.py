"""Two real servers on one PostgreSQL, each with its own models folder as two hosts would have:
a reference added through one is found by a recognition sent to the other, removed through the
other it is found no more; `arengine references` works on the same database."""

from __future__ import annotations

from pathlib import Path

import pytest

from arengine.db.engine import open_engine
from arengine.db.url import parse
from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE
from arengine.kinds.fingerprint.references import library_of
from tests.conftest import Server, ServerFactory
from tests.conftest import run_cli as _arengine
from tests.fingerprints import Placed, mix, piece
from tests.postgres import PostgreSQL
from tests.recordings import write

ADMIN = {"Authorization": "Bearer admin-key-1"}
KEYS = {"ARENGINE_ADMIN_KEYS": "admin-key-1"}
JINGLES = "/v1/models/jingles/references"

pytestmark = pytest.mark.slow  # two servers and a PostgreSQL cluster for this module alone


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three FluidR3 pieces as FLAC and a broadcast holding jingle0 at 2 s and jingle2 at 14.5 s."""
    folder = tmp_path_factory.mktemp("material")
    pieces = [piece(seed, folder) for seed in range(3)]
    for i, samples in enumerate(pieces):
        write(samples, SAMPLE_RATE, folder / f"jingle{i}.flac")
    placed = [Placed(0, 2.0, 0.0, 10.0), Placed(2, 14.5, 0.0, 10.0)]
    write(mix(30.0, pieces, placed, snr_db=10.0), SAMPLE_RATE, folder / "broadcast.wav")
    return folder


@pytest.fixture(scope="module")
def database(postgresql: PostgreSQL) -> str:
    return postgresql.database()


def _replica(
    name: str, database: str, serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    """A server with a models folder of its own holding `jingles`, whose manifest says its
    references are in the database (the folder has no library file)."""
    models = tmp_path_factory.getbasetemp() / f"models-{name}"
    if not models.exists():
        engine = open_engine(parse(database))
        library_of(models / "jingles", create=True, database=engine)
        engine.dispose()
    return serve("--models-dir", str(models), "--database-url", database, "--segment-s", "10",
                 "--max-duration-s", "60", env=KEYS)  # fmt: skip


@pytest.fixture(scope="module")
def replicas(
    database: str, serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Server, Server]:
    return (
        _replica("a", database, serve, tmp_path_factory),
        _replica("b", database, serve, tmp_path_factory),
    )


def _labels(server: Server, material: Path) -> list[str]:
    with server.client() as client:
        response = client.post(
            "/v1/recognize?model=jingles",
            files={"file": (material / "broadcast.wav").read_bytes()},
        )
    assert response.status_code == 200, response.text
    return [tag["label"] for tag in response.json()["tags"]]


def test_a_reference_added_through_one_replica_is_found_by_the_other(
    replicas: tuple[Server, Server], material: Path
) -> None:
    a, b = replicas
    assert _labels(a, material) == [] and _labels(b, material) == []
    with a.client() as client:
        flac = (material / "jingle2.flac").read_bytes()
        added = client.post(JINGLES, files={"file": ("jingle2.flac", flac)}, headers=ADMIN)
    assert added.status_code == 201, added.text
    ref = added.json()["id"]
    assert _labels(b, material) == ["jingle2"]  # b's next recognition, no restart
    with b.client() as client:
        assert client.get(f"{JINGLES}/{ref}").json()["title"] == "jingle2"
        assert client.delete(f"{JINGLES}/{ref}", headers=ADMIN).status_code == 204
    assert _labels(a, material) == []
    with a.client() as client:
        assert client.get(f"{JINGLES}/{ref}").status_code == 404


def test_the_command_line_adds_to_the_library_every_replica_serves(
    replicas: tuple[Server, Server], material: Path, database: str, tmp_path: Path
) -> None:
    a, b = replicas
    added = _arengine("references", "add", "jingles", str(material / "jingle0.flac"),
                      "--models-dir", str(tmp_path), "--database-url", database,
                      cwd=tmp_path)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "server database" in (tmp_path / "jingles" / "manifest.toml").read_text()
    ref = added.stdout.split("\t")[0]
    assert _labels(a, material) == ["jingle0"] and _labels(b, material) == ["jingle0"]
    listed = _arengine("references", "list", "jingles", "--database-url", database,
                       "--models-dir", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert listed.stdout.splitlines() == [f"{ref}\t10.000\tjingle0"]
    removed = _arengine("references", "remove", "jingles", ref, "--database-url", database,
                        "--models-dir", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    assert _labels(b, material) == []
