# syntax=docker/dockerfile:1.7
# KGWE image: `kgwe serve` (webhooks), `kgwe agent` (node agent), `kgwe certs` (certificate jobs).
# Runs as a non-root user on a read-only root filesystem; the chart mounts an emptyDir at /tmp.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: resolve and install into a virtualenv that the runtime stage copies whole ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A compiler for any dependency without a wheel for this platform; it stays in this stage.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/kgwe
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
COPY policies ./policies
COPY agent ./agent
COPY certs ./certs
COPY rego ./rego
RUN /opt/kgwe/bin/pip install --no-compile . \
    # The root filesystem is read-only at run time: compile the bytecode now, once.
    && /opt/kgwe/bin/python -m compileall -q -j 0 /opt/kgwe \
    && /opt/kgwe/bin/kgwe --help > /dev/null

# ---- runtime ----
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="kgwe" \
      org.opencontainers.image.description="Kubernetes GPU Workload Enhancer: admission webhooks, policies and node agent" \
      org.opencontainers.image.licenses="Apache-2.0"
# Same uid/gid as the chart's securityContext (runAsUser 65532), with no home and no shell.
RUN groupadd --system --gid 65532 kgwe \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin kgwe
COPY --from=build /opt/kgwe /opt/kgwe
ENV PATH=/opt/kgwe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    KGWE_STATE_DIR=/tmp/kgwe
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
ENTRYPOINT ["kgwe"]
CMD ["serve", "--config", "/etc/kgwe/config.yaml", "--tls-cert-file", "/etc/kgwe/tls/tls.crt", "--tls-private-key-file", "/etc/kgwe/tls/tls.key", "--port", "8443"]
