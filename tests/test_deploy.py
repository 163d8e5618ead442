"""Deployment files: Dockerfile, compose stack and Kubernetes manifests, checked offline.

No container is built or started here; the files are parsed and their properties and cross-file
invariants asserted, and the Kubernetes manifests validated against the Kubernetes JSON schemas
shipped by the `kubernetes-validate` package.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from arengine.settings import FIELDS, Settings

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
SETUP = ROOT / "deploy" / "setup.sh"
COMPOSE = ROOT / "deploy" / "compose" / "docker-compose.yml"
K8S = ROOT / "deploy" / "kubernetes"
POSTGRES = K8S / "optional" / "postgres"
KUBERNETES_VERSION = "1.33.0"
LABELS = {"app.kubernetes.io/name": "arengine", "app.kubernetes.io/component": "server"}


# --- a small Dockerfile parser ---------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    value: str

    def json_args(self) -> list[str] | None:
        """The exec-form arguments (`["a", "b"]`), or None for the shell form."""
        if self.value.startswith("["):
            parsed = json.loads(self.value)
            assert isinstance(parsed, list)
            return [str(item) for item in parsed]
        return None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for pair in shlex.split(instruction.value):
                key, sep, value = pair.partition("=")
                assert sep, f"ENV without `=`: {instruction.value!r}"
                values[key] = value
        return values


@dataclass
class Dockerfile:
    args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(stage for stage in self.stages if stage.name == name)


def parse_dockerfile(text: str) -> Dockerfile:
    """Instructions grouped by stage, comments dropped, `\\` continuations joined, ARGs expanded."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "Dockerfile ends inside a line continuation"

    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "FROM":
            words = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), value)
            parts = words.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, not {keyword}"
            name, _, default = value.partition("=")
            args[name] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, value))
    return Dockerfile(args=args, stages=stages)


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_parser_joins_continuations_and_expands_args() -> None:
    parsed = parse_dockerfile(
        "ARG BASE=python:3.11-slim-bookworm\n# comment\nFROM ${BASE} AS build\n"
        "RUN a \\\n    && b\nENV X=1 \\\n    Y='two words'\nFROM ${BASE}\nUSER 1:1\n"
    )
    assert [s.base for s in parsed.stages] == ["python:3.11-slim-bookworm"] * 2
    assert parsed.stage("build").all("RUN")[0].value == "a && b"
    assert parsed.stage("build").env() == {"X": "1", "Y": "two words"}
    assert parsed.stages[1].name is None
    assert parsed.stages[1].all("USER")[0].value == "1:1"


def test_dockerfile_is_multi_stage_on_slim_bookworm(dockerfile: Dockerfile) -> None:
    assert len(dockerfile.stages) >= 2
    assert all(stage.base == "python:3.11-slim-bookworm" for stage in dockerfile.stages)
    runtime = dockerfile.stages[-1]
    copied = [i.value for i in runtime.all("COPY") if i.value.startswith("--from=")]
    assert any("/opt/venv" in value for value in copied), "the venv comes from the build stage"


def _setup_runs(stage: Stage) -> list[list[str]]:
    """Each `deploy/setup.sh` command of a stage's RUN lines, as argument lists."""
    runs = []
    for instruction in stage.all("RUN"):
        for command in re.split(r"&&|;", instruction.value):
            words = shlex.split(command)
            if words and words[0].endswith("deploy/setup.sh"):
                runs.append(words)
    return runs


def _readme_setup_commands() -> dict[str, list[str]]:
    """The README's commands (`make serve`, `make test`) resolved to their setup.sh lines."""
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    commands = {}
    for target in re.findall(r"^make (\w+)", readme, flags=re.M):
        if target == "image":  # builds a container; the set-up runs inside the build
            continue
        body = re.search(rf"^{target}:\n((?:\t.*\n)+)", makefile, flags=re.M)
        assert body, f"README promises `make {target}`, the Makefile has no such target"
        setup = [line.split() for line in body.group(1).split("\n") if "deploy/setup.sh" in line]
        assert len(setup) == 1, f"`make {target}` must run deploy/setup.sh exactly once"
        commands[target] = setup[0]
    return commands


def test_image_is_set_up_by_the_readme_setup_script(dockerfile: Dockerfile) -> None:
    promised = _readme_setup_commands()
    assert promised["serve"] == ["deploy/setup.sh"], "the README's serve set-up"
    build = dockerfile.stages[0]
    assert _setup_runs(build) == [promised["serve"]], "build stage runs the serve set-up as is"
    assert build.env()["ARENGINE_VENV"] == "/opt/venv"
    runtime = dockerfile.stages[-1]
    assert [words[1:] for words in _setup_runs(runtime)] == [["--system-only"]]
    every_run = " ".join(i.value for s in dockerfile.stages for i in s.all("RUN"))
    assert "pip install" not in every_run, "packages are installed only by deploy/setup.sh"
    assert "apt-get install" not in every_run, "system packages only through deploy/setup.sh"
    # Everything the set-up installs (pyproject, README, package, models) is copied into the
    # build stage: the dependencies before the sources (a layer of their own), the rest after.
    copied = " ".join(i.value for i in build.all("COPY"))
    for needed in ("pyproject.toml", "README.md", "deploy/setup.sh", "arengine", "models"):
        assert needed in copied


def test_dockerignore_lets_in_what_the_build_copies() -> None:
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*", "allow-list: ignore everything first"
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    assert {"pyproject.toml", "README.md", "deploy/setup.sh", "arengine", "models"} <= allowed
    assert ".venv" not in allowed


def test_runtime_stage_runs_as_non_root_with_jemalloc(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.stages[-1]
    user = runtime.all("USER")[-1].value.split(":")[0]
    assert user not in {"root", "0"}
    assert user.isdigit(), "numeric USER lets Kubernetes verify runAsNonRoot"
    env = runtime.env()
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["MKL_NUM_THREADS"] == "1"
    assert env["ARENGINE_HOST"] == "0.0.0.0"
    assert env["ARENGINE_UPLOAD_DIR"].startswith("/tmp/")
    # jemalloc: either preloaded directly or left to `arengine serve`'s re-execution, in which
    # case it must be installed (setup.sh's package list) and not switched off.
    if "LD_PRELOAD" in env:
        assert "libjemalloc.so.2" in env["LD_PRELOAD"]
    else:
        assert env.get("ARENGINE_JEMALLOC", "true").lower() in {"1", "true", "yes", "on"}
        assert "libjemalloc2" in SETUP.read_text()
    runs = " ".join(i.value for i in runtime.all("RUN"))
    assert "/tmp/arengine" in runs or env["ARENGINE_UPLOAD_DIR"] == "/tmp", "upload dir exists"


def test_runtime_settings_are_valid_settings(
    dockerfile: Dockerfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = dockerfile.stages[-1].env()
    arengine_env = {k: v for k, v in env.items() if k.startswith("ARENGINE_")}
    for key in arengine_env:
        assert key[len("ARENGINE_") :].lower() in FIELDS, key
    for key, value in arengine_env.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.server.host == "0.0.0.0"
    assert settings.server.jemalloc


def test_entrypoint_port_signal_and_healthcheck(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.stages[-1]
    entrypoint = runtime.all("ENTRYPOINT")[-1].json_args()
    assert entrypoint == ["arengine", "serve"]
    assert runtime.all("EXPOSE")[-1].value.split() == ["8000"]
    assert runtime.env()["ARENGINE_PORT"] == "8000"
    assert runtime.all("STOPSIGNAL")[-1].value == "SIGTERM"
    healthcheck = runtime.all("HEALTHCHECK")[-1].value
    command = healthcheck.split(" CMD ", 1)[1].strip()
    args = json.loads(command)
    assert args[:2] == ["python", "-c"]
    assert "/healthz" in args[2]
    compile(args[2], "<healthcheck>", "exec")


def test_setup_system_only_installs_no_venv(tmp_path: Path) -> None:
    """`--system-only` stops after the system packages (here all reported installed)."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    dpkg = fake_bin / "dpkg-query"
    dpkg.write_text("#!/bin/sh\nprintf 'install ok installed'\n")
    dpkg.chmod(0o755)
    venv = tmp_path / "venv"
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "ARENGINE_VENV": str(venv)}
    env["PYTHON"] = "false"  # creating a venv would fail loudly
    done = subprocess.run(
        [str(SETUP), "--system-only"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert not venv.exists()
    wrong = subprocess.run(
        [str(SETUP), "--bogus"], env=env, capture_output=True, text=True, check=False
    )
    assert wrong.returncode == 2
    assert "unknown option" in wrong.stderr


def _fake_venv(tmp_path: Path, version: str, cuda: str | None) -> Path:
    """A venv whose python imports a stand-in `torch` reporting `version` and `cuda`."""
    site = tmp_path / "site" / "torch"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(f"__version__ = {version!r}\nfrom torch import version\n")
    (site / "version.py").write_text(f"cuda = {cuda!r}\n")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site.parent} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python.parent.parent


@pytest.mark.parametrize(
    ("version", "cuda", "ok"), [("2.13.0+cpu", None, True), ("2.13.0+cu130", "13.0", False)]
)
def test_setup_refuses_a_cuda_torch(
    tmp_path: Path, version: str, cuda: str | None, ok: bool
) -> None:
    """The check the image build runs (ARENGINE_REQUIRE_CPU_TORCH): a CUDA torch fails it."""
    venv = _fake_venv(tmp_path, version, cuda)
    env = {**os.environ, "ARENGINE_VENV": str(venv)}
    done = subprocess.run(
        [str(SETUP), "--check-torch"], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert f"torch {version} is not the CPU build (CUDA 13.0" in done.stderr
    assert "ARENGINE_REQUIRE_CPU_TORCH=1" in DOCKERFILE.read_text()


# --- compose ---------------------------------------------------------------------------------

COMPOSE_LOCAL = COMPOSE.parent / "docker-compose.local.yml"
NGINX = COMPOSE.parent / "nginx.conf"
MEASURED_PEAK_MEMORY = 1024**3
"""Bytes: tests/container/ ran two concurrent 2-hour uploads in a container limited to 1 GiB
(uploads on tmpfs, charged to it too) without an OOM kill; its cgroup peak is printed there."""


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _replicas(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("image") == "arengine:latest"
    }


def _interpolate(value: object) -> str:
    """Compose's `${NAME:-default}`, with the default (the value a user who sets nothing gets)."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))


def _settings(env: Mapping[str, object], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The server's settings under `env` (the ARENGINE_* of a compose service or a pod)."""
    for key in [k for k in os.environ if k.startswith("ARENGINE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        assert key[len("ARENGINE_") :].lower() in FIELDS, key
        monkeypatch.setenv(key, _interpolate(value))
    return Settings()


def _seconds(duration: str) -> float:
    """A compose duration: `75s`, `1m30s`."""
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, duration
    return 60 * int(parts.group(1) or 0) + int(parts.group(2) or 0)


def _bytes(size: str) -> int:
    """`2g`, `64m`, `17Gi`, `2048m`: compose, nginx and Kubernetes sizes."""
    parts = re.fullmatch(r"(\d+)([kmgKMG]i?)?", size)
    assert parts, size
    unit = (parts.group(2) or " ")[0].lower()
    power = {" ": 0, "k": 1, "m": 2, "g": 3}[unit]
    return int(parts.group(1)) * int(1024**power)


def _tmpfs_size(entry: str) -> int:
    size = re.search(r"size=(\w+)", entry)
    assert size, f"a tmpfs without a size grows to half the host's memory: {entry}"
    return _bytes(size.group(1))


def test_compose_runs_two_read_only_replicas_with_cpu_limit_matching_threads(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    replicas = _replicas(compose)
    assert len(replicas) == 2
    for service in replicas.values():
        assert service["build"]["context"] == "../.."
        assert (COMPOSE.parent / service["build"]["context"] / "Dockerfile").is_file()
        settings = _settings(service["environment"], monkeypatch)
        assert settings.server.host == "0.0.0.0"
        assert service["read_only"] is True
        cpus = float(service["deploy"]["resources"]["limits"]["cpus"])
        assert cpus == settings.engine.engine_threads >= 1
        assert "ports" not in service, "replicas are reached through the balancer"


def test_compose_drain_fits_in_the_stop_grace_period(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for service in _replicas(compose).values():
        settings = _settings(service["environment"], monkeypatch)
        drain = settings.server.shutdown_delay_s + settings.server.shutdown_timeout_s
        assert _seconds(service["stop_grace_period"]) >= drain + 5, "docker would SIGKILL a drain"
        assert service["stop_signal"] == "SIGTERM"


def test_compose_uploads_fit_where_they_are_spooled(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tmpfs upload dir is charged to the memory limit: it must hold every admitted upload and
    still leave the measured peak below the limit; a volume (disk) is charged nothing."""
    for service in _replicas(compose).values():
        settings = _settings(service["environment"], monkeypatch)
        memory = _bytes(service["deploy"]["resources"]["limits"]["memory"])
        assert memory > MEASURED_PEAK_MEMORY
        upload_dir = str(settings.server.upload_dir)
        tmpfs = {e.split(":")[0]: e for e in service.get("tmpfs", [])}
        volumes = {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}
        if upload_dir in tmpfs:
            size = _tmpfs_size(tmpfs[upload_dir])
            assert size >= settings.limits.max_pending_requests * settings.limits.max_upload_bytes
            tmp_total = sum(_tmpfs_size(entry) for entry in tmpfs.values())
            assert tmp_total + MEASURED_PEAK_MEMORY <= memory
        else:
            assert upload_dir in volumes, "the upload dir is writable under read_only"
            assert volumes[upload_dir] in compose["volumes"], "a named volume per replica"
    sources = [
        v.split(":")[0]
        for s in _replicas(compose).values()
        for v in s["volumes"]
        if v.split(":")[1] == str(_settings(s["environment"], monkeypatch).server.upload_dir)
    ]
    assert len(set(sources)) == len(sources), "replicas never share an upload dir"


def test_compose_replicas_share_the_database_and_one_data_volume_under_their_own_names(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job is reached whichever replica the balancer picks, either runs queued jobs, and they
    survive the containers: one PostgreSQL (the `postgres` service, the password a secret's
    file, never in the URL) and one named volume for the jobs' files."""
    stores = set()
    postgres = compose["services"]["postgres"]
    for service in _replicas(compose).values():
        settings = _settings(service["environment"], monkeypatch)
        assert settings.database.database_url is not None
        url = urlsplit(settings.database.database_url.get_secret_value())
        assert (url.scheme, url.hostname, url.port) == ("postgresql", "postgres", 5432)
        assert url.password is None, "the password comes from the secret's file"
        assert url.username == postgres["environment"]["POSTGRES_USER"]
        assert url.path == "/" + postgres["environment"]["POSTGRES_DB"]
        secret = Path(str(settings.database.database_password_file))
        assert secret.parent == Path("/run/secrets") and secret.name in service["secrets"]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        volumes = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        assert volumes[str(settings.jobs.data_dir)] in compose["volumes"], "a named volume"
        stores.add(volumes[str(settings.jobs.data_dir)])
    assert len(stores) == 1
    names = [service["hostname"] for service in _replicas(compose).values()]
    assert len(set(names)) == len(names), "each replica takes up its own jobs at restart"


def test_compose_postgres_reads_the_same_secret_and_reports_its_health(
    compose: dict[str, Any],
) -> None:
    postgres = compose["services"]["postgres"]
    assert postgres["image"].split(":")[0] == "postgres", "the official image"
    environment = postgres["environment"]
    assert Path(environment["POSTGRES_PASSWORD_FILE"]).name in postgres["secrets"]
    assert "POSTGRES_PASSWORD" not in environment
    assert "ports" not in postgres, "reached by the replicas only"
    test = postgres["healthcheck"]["test"]
    assert test[:2] == ["CMD", "pg_isready"]
    assert test[test.index("-U") + 1] == environment["POSTGRES_USER"]
    assert test[test.index("-d") + 1] == environment["POSTGRES_DB"]
    volumes = {v.split(":")[1]: v.split(":")[0] for v in postgres["volumes"]}
    assert Path(environment["PGDATA"]).parent.as_posix() in volumes
    data = {v.split(":")[0] for s in _replicas(compose).values() for v in s["volumes"]}
    assert not set(volumes.values()) & data, "the database has a volume of its own"
    secret = compose["secrets"]["database-password"]["file"]
    assert _interpolate(secret) == "./database-password"
    ignored = (COMPOSE.parent / ".gitignore").read_text().split()
    assert "database-password" in ignored, "a password file is never committed"
    for service in _replicas(compose).values():
        assert "/readyz" in " ".join(service["healthcheck"]["test"])


def test_balancer_agrees_with_the_server_settings(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = NGINX.read_text()
    mounts = {m.split(":")[1]: m.split(":")[0] for m in compose["services"]["balancer"]["volumes"]}
    assert (COMPOSE.parent / mounts["/etc/nginx/conf.d/default.conf"]).resolve() == NGINX

    def directive(name: str) -> str:
        found = re.findall(rf"^\s*{name}\s+([^;]+);", conf, flags=re.M)
        assert len(found) == 1, name
        return str(found[0])

    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", conf, flags=re.M)
    assert sorted(host for host, _ in upstreams) == sorted(_replicas(compose))
    for service in _replicas(compose).values():
        settings = _settings(service["environment"], monkeypatch)
        assert {int(port) for _, port in upstreams} == {settings.server.port}
        assert _bytes(directive("client_max_body_size")) == settings.limits.max_upload_bytes
        assert _seconds(directive("client_body_timeout")) == settings.limits.body_timeout_s
        assert _seconds(directive("proxy_read_timeout")) > settings.limits.request_timeout_s
    assert directive("proxy_request_buffering") == "on", "slow uploads held by nginx, not replicas"
    assert directive("proxy_buffering") == "off", "NDJSON tags arrive as they are final"
    assert _seconds(directive("client_header_timeout")) == settings.limits.header_timeout_s
    retried = directive("proxy_next_upstream").split()
    assert {"error", "http_503", "non_idempotent"} <= set(retried), "overload goes to the other"
    # nginx counts a listed http_503 as a failed attempt: with max_fails above 0, two replicas
    # at their admission limit were both marked down and the balancer answered 502 to all.
    servers = re.findall(r"^\s*server\s+[\w.-]+:\d+(.*);", conf, flags=re.M)
    assert servers and all("max_fails=0" in options.split() for options in servers), servers


def test_compose_prometheus_scrapes_every_replica(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in prometheus["volumes"]}
    source = COMPOSE.parent / mounts["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load(source.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["arengine"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert sorted(targets) == sorted(f"{name}:8000" for name in _replicas(compose))


def test_compose_local_override_swaps_only_images(compose: dict[str, Any]) -> None:
    override = yaml.safe_load(COMPOSE_LOCAL.read_text())
    for name, service in override["services"].items():
        assert name in compose["services"]
        assert set(service) <= {"image", "profiles"}
    assert override["services"]["grafana"]["profiles"] == ["grafana"]
    for name in ("balancer", "prometheus", "postgres"):
        image = override["services"][name]["image"]
        dockerfile = (
            COMPOSE.parent / "local" / f"{image.split(':')[0].removeprefix('arengine-')}.Dockerfile"
        )
        assert dockerfile.is_file(), dockerfile
    built = re.search(
        r"^for name in ([\w ]+); do", (COMPOSE.parent / "local" / "build.sh").read_text(), re.M
    )
    assert built, "local/build.sh builds each local image in one loop"
    local = {s["image"] for s in override["services"].values() if "image" in s}
    assert {f"arengine-{name}:local" for name in built.group(1).split()} == local


def test_compose_grafana_is_provisioned(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in grafana["volumes"]}
    provisioning = COMPOSE.parent / mounts["/etc/grafana/provisioning"]
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    source = datasources["datasources"][0]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in compose["services"]
    providers = yaml.safe_load((provisioning / "dashboards" / "arengine.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    # The provider reads the folder that deploy/grafana/ (arengine.json's folder) is mounted at.
    dashboards_source = next(host for target, host in mounts.items() if target == path)
    assert (COMPOSE.parent / dashboards_source).resolve() == ROOT / "deploy" / "grafana"
    # Every panel's data source is the dashboard's `datasource` variable, which picks the
    # provisioned source by its type.
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "arengine.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == source["type"]
    for panel in dashboard["panels"]:
        for item in [panel, *panel.get("targets", [])]:
            if "datasource" in item:
                assert item["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def _compose_command() -> list[str] | None:
    if shutil.which("docker") is not None:
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


@pytest.mark.skipif(_compose_command() is None, reason="neither docker compose nor docker-compose")
def test_docker_compose_config_accepts_the_files() -> None:
    command = _compose_command()
    assert command is not None
    for files in ([COMPOSE], [COMPOSE, COMPOSE_LOCAL]):
        arguments = [part for path in files for part in ("-f", str(path))]
        done = subprocess.run(
            [*command, *arguments, "config", "-q"], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr


# --- Kubernetes ------------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(documents) == 1, f"{path.name}: one resource per file"
    document = documents[0]
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    return _load(K8S / "kustomization.yaml")


@pytest.fixture(scope="module")
def resources(kustomization: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The resources `kubectl apply -k` applies: the interactive server's (named `arengine`) by
    kind, the others by kind and name (`PersistentVolumeClaim/arengine-data`)."""
    loaded = [_load(K8S / name) for name in kustomization["resources"]]
    by_kind = {_key(resource): resource for resource in loaded}
    assert len(by_kind) == len(loaded), "one resource of each kind and name"
    return by_kind


def _key(resource: dict[str, Any]) -> str:
    name = resource["metadata"]["name"]
    return resource["kind"] if name == "arengine" else f"{resource['kind']}/{name}"


WORKLOADS = ("Deployment",)
"""The pod templates: the replicas, each of them serving requests and running jobs."""


def test_kustomization_lists_every_manifest(kustomization: dict[str, Any]) -> None:
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    assert not any(name.startswith("optional/") for name in kustomization["resources"])


def _builtin_manifests() -> list[Path]:
    return [
        path
        for path in sorted(K8S.rglob("*.yaml"))
        if path.name != "kustomization.yaml"
        and not _load(path)["apiVersion"].startswith("monitoring.coreos.com/")
    ]


@pytest.mark.parametrize("path", _builtin_manifests(), ids=lambda p: str(p.relative_to(K8S)))
def test_manifest_matches_kubernetes_schema(path: Path) -> None:
    try:
        kubernetes_validate.validate(_load(path), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{path.name}: {str(error).splitlines()[0]} at {list(error.path)}")


def test_schema_validation_rejects_a_misspelt_field() -> None:
    deployment = _load(K8S / "deployment.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container = containers[0]
    assert isinstance(container, dict)
    return container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_deployment_cpu_equals_engine_threads(
    resources: dict[str, dict[str, Any]], workload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    container = _container(resources[workload])
    env = _env(container)
    threads = int(env["ARENGINE_ENGINE_THREADS"])
    assert threads >= 1
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert str(requests["cpu"]) == str(limits["cpu"]) == str(threads)
    assert requests["memory"] == limits["memory"]
    for key, value in env.items():
        assert key[len("ARENGINE_") :].lower() in FIELDS, key
        monkeypatch.setenv(key, value)
    assert Settings().engine.engine_threads == threads


@pytest.mark.parametrize("workload", WORKLOADS)
def test_deployment_probes_and_shutdown(
    resources: dict[str, dict[str, Any]], workload: str
) -> None:
    deployment = resources[workload]
    container = _container(deployment)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["http"] == int(_env(container)["ARENGINE_PORT"])
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ("http", ports["http"])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_deployment_drain_and_uploads_agree_with_the_settings(
    resources: dict[str, dict[str, Any]], workload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grace period counts from the preStop hook: sleep + shutdown delay + drain fit in it;
    the upload emptyDir holds every admitted upload; memory is above the measured peak."""
    deployment = resources[workload]
    container = _container(deployment)
    pod = deployment["spec"]["template"]["spec"]
    settings = _settings(_env(container), monkeypatch)
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    drain = int(sleep[1]) + settings.server.shutdown_delay_s + settings.server.shutdown_timeout_s
    assert pod["terminationGracePeriodSeconds"] >= drain + 5
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    uploads = volumes[mounts[str(settings.server.upload_dir)]]["emptyDir"]
    assert uploads.get("medium") != "Memory", "a memory emptyDir is charged to the limit"
    assert (
        _bytes(uploads["sizeLimit"])
        >= settings.limits.max_pending_requests * settings.limits.max_upload_bytes
    )
    assert _bytes(container["resources"]["limits"]["memory"]) > MEASURED_PEAK_MEMORY
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60, "torch import + warm-up"


@pytest.mark.parametrize("workload", WORKLOADS)
def test_deployment_security_and_writable_upload_dir(
    resources: dict[str, dict[str, Any]], workload: str
) -> None:
    deployment = resources[workload]
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    upload_dir = _env(container)["ARENGINE_UPLOAD_DIR"]
    assert "emptyDir" in volumes[mounts[upload_dir]]
    # The image's user is the pod's user.
    image_user = parse_dockerfile(DOCKERFILE.read_text()).stages[-1].all("USER")[-1].value
    assert image_user.split(":")[0] == str(pod["securityContext"]["runAsUser"])


def test_labels_and_selectors_match(resources: dict[str, dict[str, Any]]) -> None:
    deployment, service = resources["Deployment"], resources["Service"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == LABELS
    assert selector.items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    pdb = resources["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container_ports = {p["name"]: p["containerPort"] for p in _container(deployment)["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in container_ports


def test_service_monitor_selects_the_service(resources: dict[str, dict[str, Any]]) -> None:
    monitor, service = resources["ServiceMonitor"], resources["Service"]
    # Structural check of the CRD (its schema is not among the built-in Kubernetes ones).
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) <= {"apiVersion", "kind", "metadata", "spec"}
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", monitor["metadata"]["name"])
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {port["name"] for port in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"]
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"


def test_autoscalers_target_the_deployment(resources: dict[str, dict[str, Any]]) -> None:
    deployment = resources["Deployment"]
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    default = resources["HorizontalPodAutoscaler"]
    queue = _load(K8S / "optional" / "hpa-queue-depth.yaml")
    for hpa in (default, queue):
        assert hpa["apiVersion"] == "autoscaling/v2"
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert default["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert queue["spec"]["metrics"][0]["pods"]["metric"]["name"] == "arengine_queued_segments"
    pdb = resources["PodDisruptionBudget"]
    assert pdb["spec"]["maxUnavailable"] < default["spec"]["minReplicas"]


def test_kustomization_image_override_names_the_deployments_image(
    kustomization: dict[str, Any], resources: dict[str, dict[str, Any]]
) -> None:
    """`images:` only rewrites containers whose image name matches it exactly."""
    names = {entry["name"] for entry in kustomization["images"]}
    images = {_container(resources[workload])["image"] for workload in WORKLOADS}
    assert len(images) == 1
    assert images.pop().rsplit(":", 1)[0] in names


def test_every_replica_runs_jobs_on_the_database_and_the_shared_claim(
    resources: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs on every pod of the Deployment: the database URL from a file of the Secret's volume
    (no credentials in the manifests), the data directory on the ReadWriteMany claim, big enough
    for the store's budget and the uploads accepted just under it, a budget that holds every
    queued upload; the pods' own names are their replica names."""
    container = _container(resources["Deployment"])
    env = _env(container)
    settings = _settings(env, monkeypatch)
    assert settings.jobs.data_dir is not None
    assert "ARENGINE_REPLICA_NAME" not in env, "each pod's name names its replica"
    assert "ARENGINE_DATABASE_URL" not in env and "ARENGINE_DATABASE_PASSWORD" not in env
    pod = resources["Deployment"]["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    url_file = Path(str(settings.database.database_url_file))
    secret_mount = mounts[str(url_file.parent)]
    assert secret_mount["readOnly"] is True
    secret = volumes[secret_mount["name"]]["secret"]
    assert secret["secretName"] == "arengine-database"
    assert {item["path"]: item["key"] for item in secret["items"]} == {url_file.name: "url"}
    assert secret["defaultMode"] & 0o007 == 0, "the URL holds a password: not world-readable"
    assert "Secret" not in {r["kind"] for r in resources.values()}, "the operator makes it"
    data = volumes[mounts[str(settings.jobs.data_dir)]["name"]]
    claim = resources[f"PersistentVolumeClaim/{data['persistentVolumeClaim']['claimName']}"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "every pod, on any node, mounts it"
    queued = settings.jobs.max_queued_jobs * settings.limits.max_upload_bytes
    # The budget counts the queued uploads: a full queue alone must not pass it (new jobs would
    # get 507 before too_many_jobs), and the claim holds it plus the uploads accepted just under.
    assert settings.jobs.job_storage_bytes > queued
    storage = claim["spec"]["resources"]["requests"]["storage"]
    assert _bytes(storage) >= queued + settings.jobs.job_storage_bytes


def test_the_deployment_is_the_only_arengine_workload(resources: dict[str, dict[str, Any]]) -> None:
    """No one-pod jobs StatefulSet, no second Service: the HPA scales every pod that runs jobs."""
    workloads = [key for key, r in resources.items() if r["kind"] in {"StatefulSet", "DaemonSet"}]
    assert workloads == []
    services = [key for key, r in resources.items() if r["kind"] == "Service"]
    assert services == ["Service"]


def test_database_connections_fit_the_example_postgres(
    resources: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pod the HPA may run, and a rollout's surge, with its pool and overflow (2 x
    database_pool_size) open, plus a few for an operator: within the example's max_connections."""
    settings = _settings(_env(_container(resources["Deployment"])), monkeypatch)
    pods = resources["HorizontalPodAutoscaler"]["spec"]["maxReplicas"]
    surge = resources["Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxSurge"]
    args = _container(_load(POSTGRES / "statefulset.yaml"))["args"]
    limit = int(args[args.index("-c") + 1].removeprefix("max_connections="))
    assert (pods + surge) * 2 * settings.database.database_pool_size + 5 <= limit


def test_the_example_postgres_is_marked_not_for_production_and_matches_its_url() -> None:
    """optional/postgres/: apart from the base (kubectl apply -k does not bring it), each file
    says it is not for production, and the URL its instructions give arengine names its user,
    database, Service and port."""
    kustomization = _load(POSTGRES / "kustomization.yaml")
    assert set(kustomization["resources"]) == {p.name for p in POSTGRES.glob("*.yaml")} - {
        "kustomization.yaml"
    }
    for path in POSTGRES.glob("*.yaml"):
        assert "NOT FOR PRODUCTION" in path.read_text().split("\n", 1)[0], path.name
    statefulset, service = _load(POSTGRES / "statefulset.yaml"), _load(POSTGRES / "service.yaml")
    assert statefulset["spec"]["replicas"] == 1
    urls = re.findall(
        r"postgresql://(\w+):\S+@([\w-]+):(\d+)/(\w+)",
        (POSTGRES / "kustomization.yaml").read_text(),
    )
    assert urls, "the instructions give the URL of the Secret arengine-database"
    env = _env(_container(statefulset))
    ports = {p["name"]: p["containerPort"] for p in _container(statefulset)["ports"]}
    for user, host, port, database in urls:
        assert (user, database) == (env["POSTGRES_USER"], env["POSTGRES_DB"])
        assert host == service["metadata"]["name"] == statefulset["spec"]["serviceName"]
        assert [int(port)] == [p["port"] for p in service["spec"]["ports"]]
        assert service["spec"]["ports"][0]["targetPort"] in ports
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert not LABELS.items() <= labels.items(), "not counted as an arengine replica (PDB, HPA)"
    assert env["POSTGRES_PASSWORD_FILE"].startswith(
        next(
            m["mountPath"]
            for m in _container(statefulset)["volumeMounts"]
            if m["name"] == "password"
        )
    )


def test_ingress_sends_every_path_to_the_replicas(
    resources: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ingress = resources["Ingress"]
    routes = {
        path["path"]: (path["pathType"], path["backend"]["service"])
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    }
    assert set(routes) == {"/"}, "no route apart for /v1/jobs: every replica runs jobs"
    kind, backend = routes["/"]
    assert kind == "Prefix"
    assert backend["name"] == resources["Service"]["metadata"]["name"]
    assert backend["port"]["name"] in {
        port["name"] for port in resources["Service"]["spec"]["ports"]
    }
    settings = _settings(_env(_container(resources["Deployment"])), monkeypatch)
    annotations = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert _bytes(annotations[prefix + "proxy-body-size"]) == settings.limits.max_upload_bytes
    assert int(annotations[prefix + "proxy-read-timeout"]) > settings.limits.request_timeout_s
    assert annotations[prefix + "proxy-buffering"] == "off", "NDJSON events as they come"
