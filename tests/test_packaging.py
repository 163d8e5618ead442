"""What `pip install .` installs: the code and the built-in models.

A plain install used to have the code only: the models/ folder stayed in the checkout, `arengine
models` printed an empty table and `arengine serve` answered 503 for ever. pyproject.toml now
installs models/ as the package's `arengine/models/builtin/`.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from tests.conftest import RecordingFactory, free_port

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "arengine", "models")
"""What a build reads: the project's metadata, its code and its models (as the Dockerfile)."""


def _setuptools() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tool: dict[str, object] = config["tool"]["setuptools"]
    return tool


def test_every_folder_of_code_is_a_listed_package() -> None:
    """The packages are listed (a found package cannot be mapped from another folder): one left
    out of the list would be missing from the install."""
    code = {
        ".".join(folder.relative_to(ROOT).parts)
        for folder in (ROOT / "arengine").rglob("*")
        if folder.is_dir() and any(folder.glob("*.py")) and "__pycache__" not in folder.parts
    }
    code.add("arengine")
    listed = _setuptools()["packages"]
    assert sorted(code | {"arengine.models.builtin"}) == listed
    assert _setuptools()["package-dir"] == {"arengine.models.builtin": "models"}


def _install(tmp_path: Path) -> Path:
    """Build a wheel from a copy of the sources and install it into a new virtual environment;
    its dependencies are this interpreter's (a `.pth` file), so nothing is downloaded."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.sqlite*")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels)]
    subprocess.run([*build, str(source)], check=True, capture_output=True, timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Appended after the venv's own site-packages, and not a site folder itself (its .pth files,
    # the checkout's editable install among them, are not read).
    Path(purelib, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next(wheels.glob("arengine-*.whl"))
    install = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall"]
    subprocess.run([*install, str(wheel)], check=True, capture_output=True, timeout=300)
    return venv


def _outside(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder and an environment with no trace of the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ARENGINE_", "COV"))}
    work = tmp_path / "elsewhere"
    work.mkdir()
    return work, env


@pytest.mark.slow
def test_a_plain_install_serves_the_built_in_models(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    venv = _install(tmp_path)
    work, env = _outside(tmp_path)
    where = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import arengine.models.registry as r, json; "
            "print(r.__file__); print(r.DEFAULT_MODELS_DIR)",
        ],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert all(Path(path).is_relative_to(venv) for path in where), where
    assert Path(where[1], "notes", "nmp.pt").is_file()
    assert not list(Path(where[1]).glob("*/reference.*"))  # test data stays in the checkout

    refused = subprocess.run(
        [venv / "bin" / "arengine", "references", "add", "jingles", "x.wav"],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert refused.returncode == 2 and "name a folder with --models-dir" in refused.stderr
    assert not Path(where[1], "jingles").exists()  # nothing written into the package

    port = free_port()
    log = tmp_path / "server.log"
    (tmp_path / "uploads").mkdir()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                venv / "bin" / "arengine",
                "serve",
                "--port",
                str(port),
                "--models",
                "speech,notes",
                "--upload-dir",
                str(tmp_path / "uploads"),
            ],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        assert _ready(url, server), log.read_text()
        models = httpx.get(url + "/v1/models", timeout=10).json()
        assert models["default"] == "speech"
        assert [model["name"] for model in models["models"]] == ["notes", "speech"]
        assert models["unavailable"] == []
        talk = recording("talk.wav")
        with talk.path.open("rb") as file:
            answer = httpx.post(url + "/v1/recognize", files={"file": file}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert [tag["label"] for tag in answer.json()["tags"]] == ["speech"] * len(talk.speech)
    finally:
        server.terminate()
        server.wait(timeout=60)


def _ready(url: str, server: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    return False
