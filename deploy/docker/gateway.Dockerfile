# The gateway image: `sluicegate serve` on port 8080, as a non-root user. It also carries the
# workers package, so the same image runs the fake worker (deploy/compose/compose.yaml).
#
#   docker build -f deploy/docker/gateway.Dockerfile -t REGISTRY/sluicegate:0.1.0 .
#
# Base images are pinned by version (bump them deliberately, never `latest`).

FROM python:3.12.8-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY workers ./workers
# A virtualenv copied whole into the runtime stage: no compilers or build files follow it.
RUN python -m venv /opt/sluicegate \
    && /opt/sluicegate/bin/pip install . \
    && /opt/sluicegate/bin/sluicegate --help > /dev/null

FROM python:3.12.8-slim-bookworm
RUN groupadd --system --gid 10001 sluicegate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin sluicegate \
    && install -d -o 10001 -g 10001 /var/lib/sluicegate
COPY --from=build /opt/sluicegate /opt/sluicegate
ENV PATH=/opt/sluicegate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SLUICEGATE_HOST=0.0.0.0 \
    SLUICEGATE_PORT=8080 \
    SLUICEGATE_SPOOL_PATH=/var/lib/sluicegate/usage.spool
# A numeric user, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8080
CMD ["sluicegate", "serve"]
