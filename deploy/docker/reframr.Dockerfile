# The Reframr worker image: `python -m workers.reframr` on port 8000, as a non-root user.
# Reframr's runtime (the `reframr` package inside its model repository) needs Python >= 3.13 and
# numpy, numba and scipy; the weights are NOT in the image: mount a checkout of the model
# repository at --model-dir (the chart's modelVolume).
#
#   docker build -f deploy/docker/reframr.Dockerfile -t REGISTRY/reframr-worker:0.1.0 .

FROM python:3.13.1-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY workers ./workers
RUN python -m venv /opt/reframr \
    && /opt/reframr/bin/pip install . "numpy==2.2.6" "scipy==1.15.3" "numba==0.61.2" \
    && /opt/reframr/bin/python -m workers.reframr --help > /dev/null

FROM python:3.13.1-slim-bookworm
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
CMD ["python", "-m", "workers.reframr", "--host", "0.0.0.0", "--port", "8000", \
     "--model-name", "reframr", "--model-dir", "/models/reframr"]
