"""What `pip install .` installs: the code and the built-in models; and the client distribution
(`client/`, arengine-client) it depends on.

A plain install used to have the code only: the models/ folder stayed in the checkout, `arengine
models` printed an empty table and `arengine serve` answered 503 for ever. pyproject.toml now
installs models/ as the package's `arengine/models/builtin/`. The client alone is installed and
run against a server by `tests/e2e/test_client_alone.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from arengine.settings import HTTP_PARSERS, ServerSettings
from tests.conftest import RecordingFactory, free_port

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "arengine", "models")
"""What a build reads: the project's metadata, its code and its models (as the Dockerfile)."""


def _setuptools() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tool: dict[str, object] = config["tool"]["setuptools"]
    return tool


def _project(folder: Path) -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    return config


def test_the_client_distribution_is_released_with_arengine() -> None:
    """One version for both; arengine depends on exactly that client; the client needs only
    httpx and websockets; both install the same `arengine` command."""
    server, client = _project(ROOT), _project(ROOT / "client")
    version = server["project"]["version"]
    assert client["project"]["name"] == "arengine-client"
    assert client["project"]["version"] == version
    assert f"arengine-client=={version}" in server["project"]["dependencies"]
    names = [re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0] for d in client["project"]["dependencies"]]
    assert names == ["httpx", "websockets"]
    assert client["project"]["scripts"] == server["project"]["scripts"]
    assert server["project"]["scripts"] == {"arengine": "arengine_client.cli:main"}
    code = sorted(
        ".".join(folder.relative_to(ROOT / "client").parts)
        for folder in (ROOT / "client").rglob("*")
        if folder.is_dir()
        and any(folder.glob("*.py"))
        # `build`: where pip builds, in the folder it is given
        and not {"__pycache__", "build"} & set(folder.relative_to(ROOT / "client").parts)
    )
    assert client["tool"]["setuptools"]["packages"] == code == ["arengine_client"]


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
    ignore = shutil.ignore_patterns("__pycache__", "*.sqlite*", "*.egg-info", "build")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "client", tmp_path / "client", ignore=ignore)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels)]
    for folder in (source, tmp_path / "client"):
        subprocess.run([*build, str(folder)], check=True, capture_output=True, timeout=300)
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
    # Both distributions' wheels: arengine imports arengine_client, whose editable install in the
    # checkout's environment is not on the path above.
    built = [str(wheel) for wheel in sorted(wheels.glob("arengine*.whl"))]
    assert len(built) == 2, built
    install = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall"]
    subprocess.run([*install, *built], check=True, capture_output=True, timeout=300)
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
            "import arengine.models as m; print(m.__file__); print(m.DEFAULT_MODELS_DIR)",
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


def test_the_default_http_parser_is_installed_with_the_package() -> None:
    """A pip install and the image (the same `pip install`) serve with the same parser: the
    default one is a dependency, not an extra uvicorn may or may not find."""
    dependencies = _project(ROOT)["project"]["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", dependency)[0].lower() for dependency in dependencies}
    assert HTTP_PARSERS[0] in names
    assert ServerSettings.model_fields["http_parser"].default == HTTP_PARSERS[0]


def test_a_copy_imported_from_elsewhere_is_counted_as_the_checkout(tmp_path: Path) -> None:
    """Coverage of a process that imported an installed copy of a package (a test's virtual
    environment) is the checkout's (pyproject's [tool.coverage.paths]). Before, the report gained
    a row per file of the copy, nearly all unexecuted, and a CI run fell to 87.9% with every row
    of the checkout unchanged."""
    site_packages = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    copy = site_packages / "arengine_client"
    shutil.copytree(
        ROOT / "client" / "arengine_client", copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    script = tmp_path / "imports.py"
    script.write_text("import arengine_client\n")
    (tmp_path / "data").mkdir()
    data = f"--data-file={tmp_path / 'data' / 'coverage'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COV")}
    env["PYTHONPATH"] = str(site_packages)

    def coverage(*args: str) -> str:
        command = [sys.executable, "-m", "coverage", *args]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert coverage("run", data, str(script)) == ""
    coverage("combine", "-q", data)
    report = coverage(
        "report", data, "--no-skip-covered", "--fail-under=0", "--include=*/arengine_client/*"
    )
    rows = [line.split()[0] for line in report.splitlines() if "arengine_client" in line]
    assert "client/arengine_client/__init__.py" in rows
    assert not [row for row in rows if str(tmp_path) in row or row.startswith("/")], report
