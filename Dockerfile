# syntax=docker/dockerfile:1
#
# gitlab-mcp-gateway container image.
#
#   docker build -t gitlab-mcp-gateway:0.3.0 --build-arg GATEWAY_REVISION="$(git rev-parse --short=12 HEAD)" .
#   docker run --rm -p 127.0.0.1:8080:8080 -e GITLAB_TOKEN -e GATEWAY_CLIENT_TOKENS \
#       -v gateway-state:/var/lib/gitlab-mcp-gateway gitlab-mcp-gateway:0.3.0 --host 0.0.0.0
#
# PYTHON_IMAGE is any image with Python 3.11+ as `python3` (and its venv module): the tests
# (tests/container/test_image.py) build this file with podman on a base made from Debian's
# packages, `--build-arg PYTHON_IMAGE=localhost/...`, run it and stop it. The file is linted with
# hadolint (tests/unit/test_deploy.py); docs/operations.md says how to build it.
#
# Stage 1 installs the gateway and its dependencies into a virtual environment. Every dependency
# ships a manylinux wheel, so no compiler is needed even here.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# Behind a TLS-inspecting proxy, pip needs that proxy's CA: mount the bundle read-only for the
# build and name it, e.g. `podman build -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro
# --build-arg PIP_CERT=/run/host-ca.crt .` (empty, pip uses its own CA list). The empty default
# keeps podman/buildah from warning about a missing build argument on every build.
ARG PIP_CERT=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python3 -m venv /opt/venv
# The git revision the image is built from (the build context has no .git): setup.py bakes it
# into the package, for gateway_build_info{revision} and --version.
ARG GATEWAY_REVISION=unknown
COPY pyproject.toml setup.py README.md MANIFEST.in ./
COPY gateway ./gateway
# An empty PIP_CERT is unset: pip would otherwise take it over a pip.conf of the base image.
RUN if [ -z "$PIP_CERT" ]; then unset PIP_CERT; fi \
    && /opt/venv/bin/pip install --no-cache-dir . \
    && /opt/venv/bin/pip uninstall --yes pip setuptools wheel \
    && /opt/venv/bin/python -m compileall -q /opt/venv

# Stage 2: the same slim Python, the virtual environment and nothing else (no pip, no sources,
# no build tools), run as an unprivileged user.
FROM ${PYTHON_IMAGE}
# The official Python image ships pip and setuptools for its own Python; the gateway needs neither
# at run time (Debian's python3 has no pip: nothing to remove there).
RUN if python3 -m pip --version >/dev/null 2>&1; then \
      python3 -m pip uninstall --yes --root-user-action=ignore pip setuptools wheel; \
    fi
ARG GATEWAY_REVISION=unknown
LABEL org.opencontainers.image.title="gitlab-mcp-gateway" \
      org.opencontainers.image.description="MCP gateway to GitLab (Streamable HTTP on /mcp) with a phase broker for agents" \
      org.opencontainers.image.version="0.3.0" \
      org.opencontainers.image.revision="${GATEWAY_REVISION}" \
      org.opencontainers.image.licenses="MIT"
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gateway \
    && mkdir -p /var/lib/gitlab-mcp-gateway \
    && chown gateway:gateway /var/lib/gitlab-mcp-gateway
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GATEWAY_STATE_DIR=/var/lib/gitlab-mcp-gateway \
    GATEWAY_LOGGING__FORMAT=json
# The broker's SQLite database, activity logs and .stop-pipeline live here: keep it on a volume.
VOLUME ["/var/lib/gitlab-mcp-gateway"]
USER 10001:10001
EXPOSE 8080
# GET http://127.0.0.1:${GATEWAY_SERVER__PORT:-8080}/healthz with Python's standard library (the
# image has no curl), bypassing any HTTP(S)_PROXY. Set the port with GATEWAY_SERVER__PORT rather
# than --port, so this check follows it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-m", "gateway.observability.probe"]
# The gateway stops cleanly on SIGTERM (the default stop signal): in-flight calls finish within
# server.shutdown_timeout_seconds, so give `docker stop -t` / terminationGracePeriodSeconds more.
ENTRYPOINT ["gitlab-mcp-gateway"]
# 127.0.0.1: reachable only inside the container or pod (the sidecar case). Publishing a port
# with `docker run -p` needs `--host 0.0.0.0`, and then client tokens (see docs/operations.md).
CMD ["--host", "127.0.0.1"]
