# syntax=docker/dockerfile:1
#
# The proxima-agent image, for Docker users. The released image is built without a container
# engine by `python scripts/release.py image` (docs/releasing.md); this file builds the same
# thing with Docker: Debian's python3, the project wheel and the pinned agent dependencies
# (docker/agent-constraints.txt) in a venv at /opt/proxima-agent, UID 65532, the same
# environment and entrypoint (tests/release/test_dockerfile.py holds the two to each other).
# One image serves every agent type: the chart picks it with PROXIMA_AGENT_TYPE.
#
#   docker build -f docker/agent.Dockerfile \
#     --build-arg VERSION=$(python3 scripts/release.py version) \
#     -t registry.example/proxima/proxima-agent:$(python3 scripts/release.py version) .
#
# Built to run as UID 65532 with a read-only root filesystem: the agent writes only to
# /var/lib/proxima-agent (its state) and /tmp (an emptyDir in the chart). Nothing is compiled
# or cached at run time. The image layer is read-only, so the agent cannot replace its own
# binary: pods are upgraded by `helm upgrade`, never by a fleet self_update.
#
# The one difference: debian:bookworm-slim carries apt; the released base (mmdebstrap
# --variant=essential) does not.

ARG VERSION

FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && python3 -m venv /build
WORKDIR /src
# Only what the agent is made of: the wheel carries contracts and agent, not the Console.
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY agent ./agent
COPY docker/agent-constraints.txt ./
# Wheels for the project, every pinned dependency of the agent extra and pip itself (nkeys has
# no wheel on PyPI and builds here, so the runtime stage needs no compiler).
RUN /build/bin/pip wheel --no-cache-dir --wheel-dir /wheels -c agent-constraints.txt ".[agent]" pip

FROM debian:bookworm-slim
ARG VERSION
LABEL org.opencontainers.image.title="proxima-agent" \
      org.opencontainers.image.description="Proxima fleet agent: host, Kubernetes node monitor and cluster collector" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://gitlab.prxm.uz"

ENV PATH=/opt/proxima-agent/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PROXIMA_DATA_DIR=/var/lib/proxima-agent \
    PROXIMA_HEALTH_HOST=0.0.0.0 \
    PROXIMA_HEALTH_PORT=8181

# pip runs from its wheel and is not installed: nothing installs anything at run time. The
# byte code is compiled now (unchecked-hash: a read-only root never needs __pycache__).
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    test -n "${VERSION}" \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv --without-pip /opt/proxima-agent \
    && /opt/proxima-agent/bin/python /wheels/pip-*.whl/pip install --no-index \
       --find-links /wheels --no-compile --no-cache-dir "proxima-fleet[agent]==${VERSION}" \
    && /opt/proxima-agent/bin/python -m compileall -q --invalidation-mode unchecked-hash \
       /opt/proxima-agent/lib \
    && echo 'proxima:x:65532:65532:proxima-agent:/tmp:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'proxima:x:65532:' >> /etc/group \
    && install -d -o 65532 -g 65532 -m 0700 /var/lib/proxima-agent \
    && chmod 0755 /var/tmp /run/lock \
    && proxima-agent --help > /dev/null

WORKDIR /var/lib/proxima-agent
USER 65532:65532
EXPOSE 8181

# Kubernetes uses the chart's probes; this serves `docker run`. No curl in the image.
HEALTHCHECK --interval=30s --timeout=3s --start-period=15s \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('PROXIMA_HEALTH_PORT', '8181'), timeout=2)"]

ENTRYPOINT ["/opt/proxima-agent/bin/proxima-agent"]
CMD ["run"]
