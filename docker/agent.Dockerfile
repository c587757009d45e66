# syntax=docker/dockerfile:1
#
# The proxima-agent image. One image serves every agent type: the chart picks the type with
# PROXIMA_AGENT_TYPE (k8s-node-monitor for the DaemonSet, k8s-cluster-collector for the
# StatefulSet).
#
#   docker build -f docker/agent.Dockerfile -t registry.prxm.uz/proxima/proxima-agent:0.8.0 .
#
# Built to run as UID 65532 with a read-only root filesystem: the agent writes only to
# /var/lib/proxima-agent (its state) and /tmp (an emptyDir in the chart). Nothing is compiled
# or cached at run time. The image layer is read-only, so the agent cannot replace its own
# binary: pods are upgraded by `helm upgrade`, never by a fleet self_update.

ARG VERSION=0.8.0

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the agent is made of: the wheel carries contracts and agent, not the Console.
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY agent ./agent
# Wheels for the project and every dependency of the agent extra (nkeys has no wheel on PyPI
# and builds here, so the runtime stage needs no compiler).
RUN pip wheel --wheel-dir /wheels ".[agent]"

FROM python:3.11-slim
ARG VERSION
LABEL org.opencontainers.image.title="proxima-agent" \
      org.opencontainers.image.description="Proxima fleet agent: host, Kubernetes node monitor and cluster collector" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://gitlab.prxm.uz"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    PROXIMA_DATA_DIR=/var/lib/proxima-agent \
    PROXIMA_HEALTH_HOST=0.0.0.0 \
    PROXIMA_HEALTH_PORT=8181

# pip compiles the byte code at install time, so a read-only root never needs __pycache__.
# pip and setuptools go afterwards: nothing installs anything at run time.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "proxima-fleet[agent]==${VERSION}" \
    && python -m compileall -q /usr/local/lib/python3.11/site-packages \
    && pip uninstall --yes pip setuptools wheel \
    && groupadd --system --gid 65532 proxima \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin proxima \
    && install -d -o 65532 -g 65532 -m 0700 /var/lib/proxima-agent \
    && proxima-agent --help > /dev/null

WORKDIR /var/lib/proxima-agent
USER 65532:65532
EXPOSE 8181

# Kubernetes uses the chart's probes; this serves `docker run`. No curl in the slim image.
HEALTHCHECK --interval=30s --timeout=3s --start-period=15s \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('PROXIMA_HEALTH_PORT', '8181'), timeout=2)"]

ENTRYPOINT ["proxima-agent"]
CMD ["run"]
