# The Reframr worker image: `python -m workers.reframr` on port 8000, as a non-root user, on a
# read-only root filesystem (HOME and numba's cache are under /tmp). Reframr's runtime (the
# `reframr` package inside its model repository) needs Python >= 3.13 and numpy, numba and scipy;
# the weights are NOT in the image: mount a checkout of the model repository at --model-dir (the
# chart's modelVolume).
#
#   docker build -f deploy/docker/reframr.Dockerfile --build-arg VERSION=0.1.0 -t REGISTRY/reframr-worker:0.1.0 .
#
# `make image` builds this same file with podman on a base made from Debian's packages
# (tools/image/build.sh passes BASE); everywhere else BASE is the official image, pinned by version.
ARG BASE=docker.io/library/python:3.13.7-slim-trixie

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY workers ./workers
RUN python3 -m venv /opt/reframr \
    && /opt/reframr/bin/pip install . "numpy==2.2.6" "scipy==1.15.3" "numba==0.61.2" \
    && /opt/reframr/bin/python -m workers.reframr --help > /dev/null \
    && /opt/reframr/bin/pip uninstall --yes pip

# The CycloneDX SBOM of the runtime stage's venv (see gateway.Dockerfile).
FROM build AS sbom
RUN python3 -m venv /opt/sbom \
    && /opt/sbom/bin/pip install cyclonedx-bom==7.5.0 \
    && /opt/sbom/bin/cyclonedx-py environment --output-reproducible --pyproject pyproject.toml \
       --output-file /sbom.cdx.json /opt/reframr

FROM ${BASE}
ARG VERSION=dev
LABEL org.opencontainers.image.title="reframr-worker" \
      org.opencontainers.image.description="The Reframr model served as a Sluicegate worker" \
      org.opencontainers.image.source="https://github.com/sluicegate/sluicegate" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
RUN groupadd --system --gid 10001 reframr \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin reframr
COPY --from=build /opt/reframr /opt/reframr
ENV PATH=/opt/reframr/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    NUMBA_CACHE_DIR=/tmp/numba
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["python", "-m", "workers.reframr"]
CMD ["--host", "0.0.0.0", "--port", "8000", "--model-name", "reframr", "--model-dir", "/models/reframr"]
