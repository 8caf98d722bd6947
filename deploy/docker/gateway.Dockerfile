# The gateway image: `sluicegate serve` on port 8080, as a non-root user, on a read-only root
# filesystem (writable: /tmp and the spool volume at /var/lib/sluicegate). It also carries the
# workers package, so the same image runs the fake worker (deploy/compose/compose.yaml).
#
#   docker build -f deploy/docker/gateway.Dockerfile --build-arg VERSION=0.1.0 -t REGISTRY/sluicegate:0.1.0 .
#
# `make image` builds this same file with podman, no daemon, on a base made from Debian's packages
# (tools/image/build.sh passes BASE); everywhere else BASE is the official image, pinned by version
# (bump it deliberately, never `latest`). Both are Debian trixie with Python 3.13.
ARG BASE=docker.io/library/python:3.13.7-slim-trixie

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY workers ./workers
# A virtualenv copied whole into the runtime stage: no compilers or build files follow it, and
# without pip no installer either. `python3`: Debian's base has no `python` command.
RUN python3 -m venv /opt/sluicegate \
    && /opt/sluicegate/bin/pip install . \
    && /opt/sluicegate/bin/sluicegate --help > /dev/null \
    && /opt/sluicegate/bin/pip uninstall --yes pip

# The CycloneDX SBOM of what the runtime stage holds (its venv), by the CycloneDX project's own
# generator in a venv of its own: `--target sbom` (make image) writes it beside the archive.
FROM build AS sbom
RUN python3 -m venv /opt/sbom \
    && /opt/sbom/bin/pip install cyclonedx-bom==7.5.0 \
    && /opt/sbom/bin/cyclonedx-py environment --output-reproducible --pyproject pyproject.toml \
       --output-file /sbom.cdx.json /opt/sluicegate

FROM ${BASE}
ARG VERSION=dev
LABEL org.opencontainers.image.title="sluicegate" \
      org.opencontainers.image.description="Sluicegate, an OpenAI-compatible gateway for self-hosted LLMs" \
      org.opencontainers.image.source="https://github.com/sluicegate/sluicegate" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
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
# The spool survives the container (and a read-only root) only on a volume.
VOLUME ["/var/lib/sluicegate"]
# A numeric user, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["sluicegate"]
CMD ["serve"]
