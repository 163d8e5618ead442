"""CHANGELOG.md in the Keep a Changelog form, and one version everywhere it is shown.

The version is declared once, in pyproject.toml: the package's metadata (so `arengine --version`
and `GET /v1/info`), the image's label (`deploy/image.sh`) and the Kubernetes manifests' tag
follow it, and the changelog's latest release names it.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import arengine
from arengine.cli.commands import build_parser

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
RELEASES = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", CHANGELOG, flags=re.M)
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def test_the_latest_release_is_the_declared_version() -> None:
    assert RELEASES[0] == ("Unreleased", "")
    assert RELEASES[1][0] == VERSION and RELEASES[1][1], "a release has its date"


def test_releases_are_grouped_by_the_kinds_of_change() -> None:
    for kind in re.findall(r"^### (.+)$", CHANGELOG, flags=re.M):
        assert kind in KINDS, kind


def test_each_change_since_0_1_0_is_one_line() -> None:
    recent = CHANGELOG.split("\n## [0.1.0]")[0]
    lines = recent.splitlines()
    for number, line in enumerate(lines[:-1]):
        if line.startswith("- "):
            following = lines[number + 1]
            assert not following.startswith("  "), f"a change on two lines: {line[:60]}"


def test_the_kubernetes_image_tag_is_the_declared_version() -> None:
    folder = ROOT / "deploy" / "kubernetes"
    tags = re.findall(r"newTag: (\S+)", (folder / "kustomization.yaml").read_text())
    images = re.findall(
        r"image: arengine:(\S+)", " ".join(p.read_text() for p in folder.glob("*.yaml"))
    )
    assert set(tags) | set(images) == {VERSION}


def test_the_image_label_reads_the_version_from_pyproject() -> None:
    script = (ROOT / "deploy" / "image.sh").read_text()
    assert "org.opencontainers.image.version=$version" in script
    assert "version=$(sed -n 's/^version = " in script


def test_the_cli_and_the_info_endpoint_show_the_package_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Both read `arengine.__version__`, which is the installed package's metadata (built from
    pyproject.toml): no second copy of the number to keep in step."""
    assert arengine.__version__ == metadata.version("arengine")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"arengine {arengine.__version__}"
    routes = (ROOT / "arengine" / "http" / "routes.py").read_text()
    assert "version=__version__," in routes and "from arengine import __version__" in routes
