# syntax=docker/dockerfile:1
# arengine: audio-recognition inference server.
#   make image   (deploy/image.sh: picks the base and the torch source by what is reachable)
#   docker build -t arengine:latest . && docker run -p 8000:8000 arengine:latest
# Two stages: `build` runs deploy/setup.sh (the README's set-up, the path the tests exercise) into
# /opt/venv; `runtime` gets only the venv, the sources and the system jemalloc, and runs as a
# non-root user with nothing to write outside /tmp (so a read-only root filesystem works).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# torch==2.13.0 must be the CPU build: PyPI's default Linux wheel pulls CUDA packages, the
# PyTorch CPU index has the same version as +cpu (which `==2.13.0` matches and pip prefers).
# Where neither is reachable, deploy/image.sh serves the local CPU wheel and passes PIP_FIND_LINKS
# (an ARG is in the environment of the RUN lines) with an empty TORCH_INDEX_URL.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS
# ARENGINE_REQUIRE_CPU_TORCH: setup.sh fails the build, loudly, if pip fell back to a CUDA torch
# (PyPI's default wheel: a 5.4 GB image).
ENV ARENGINE_VENV=/opt/venv \
    ARENGINE_REQUIRE_CPU_TORCH=1 \
    PIP_EXTRA_INDEX_URL=${TORCH_INDEX_URL} \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY pyproject.toml ./
COPY client/pyproject.toml client/README.md client/
COPY deploy/setup.sh deploy/setup.sh
# The same command as `make serve`'s set-up. The install is editable (as in the README), so the
# package stays at /app, which is where it resolves its models/ folder; /app is copied as is.
# It runs before the sources are copied, on empty package folders (pyproject's list and the
# client's arengine_client) and README in their place: the editable installs map the packages to
# /app/arengine, /app/models and /app/client/arengine_client, which the COPYs below fill. So the
# dependencies (torch and the rest, minutes to install) are a layer of their own, and a change to
# arengine/, client/, models/ or the README rebuilds in seconds from the cache.
RUN python3 -c 'for p in (s := __import__("tomllib").load(open("pyproject.toml", "rb"))["tool"]["setuptools"]).get("packages", ["arengine"]): \
        __import__("pathlib").Path(s.get("package-dir", {}).get(p, p.replace(".", "/"))).mkdir(parents=True, exist_ok=True)' \
    && mkdir client/arengine_client && touch arengine/__init__.py client/arengine_client/__init__.py README.md \
    && deploy/setup.sh \
    && rm -r arengine models README.md client/arengine_client
COPY README.md ./
COPY client client
COPY arengine arengine
COPY models models
RUN /opt/venv/bin/python -m compileall -q /app/arengine /app/client/arengine_client \
    && /opt/venv/bin/arengine --version

FROM ${PYTHON_IMAGE} AS runtime
# System packages through the same script and package list (libjemalloc2), nothing else.
COPY deploy/setup.sh /app/deploy/setup.sh
RUN /app/deploy/setup.sh --system-only \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && groupadd --system --gid 10001 arengine \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin arengine \
    && install -d -o 10001 -g 10001 -m 0700 /tmp/arengine /var/lib/arengine
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app

# jemalloc: `arengine serve` re-executes itself once with LD_PRELOAD of the system libjemalloc.so.2
# and MALLOC_CONF from ARENGINE_MALLOC_CONF (tests/test_allocator.py covers it). We rely on that
# rather than a fixed LD_PRELOAD here: it finds the library on amd64 and arm64 alike (a wrong fixed
# path makes ld.so complain in every process), the MALLOC_CONF default lives in one place
# (arengine/settings.py), and /v1/info and the start-up log report the allocator actually active.
# OMP/MKL at 1: the engine runs N single-threaded inferences side by side (N = ARENGINE_ENGINE_THREADS,
# default the cgroup CPU quota); wider OpenMP pools would oversubscribe the CPUs.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    ARENGINE_HOST=0.0.0.0 \
    ARENGINE_PORT=8000 \
    ARENGINE_JEMALLOC=true \
    ARENGINE_MODELS_DIR=/app/models \
    ARENGINE_UPLOAD_DIR=/tmp/arengine

# The job store's place (jobs are on with ARENGINE_DATA_DIR=/var/lib/arengine): a volume, so that
# jobs outlive the container.
VOLUME /var/lib/arengine
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /app
EXPOSE 8000
# uvicorn drains in-flight requests on SIGTERM (30 s graceful timeout in arengine/cli/commands.py).
STOPSIGNAL SIGTERM
# Liveness only (/healthz); readiness (/readyz, models warmed) is for the orchestrator. No curl in
# slim images: Python's urllib raises, so exits non-zero, on a refused connection or a non-2xx.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ARENGINE_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["arengine", "serve"]
