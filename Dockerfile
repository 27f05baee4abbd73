# netgrad service image. There is no Docker engine on the development machines, so this file
# is checked by tests/ops/test_deploy.py (entry point and healthcheck against the CLI) rather
# than built in CI. Where an engine exists, build and run it with:
#   docker build -t netgrad:0.1.0 . && docker run --rm -p 8000:8000 netgrad:0.1.0
# The base image is pinned by version and digest (a tag can be re-pushed; a digest cannot).
FROM python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NETGRAD_HOST=0.0.0.0 \
    NETGRAD_PORT=8000 \
    NETGRAD_LOG_FORMAT=json

WORKDIR /srv/netgrad
COPY pyproject.toml README.md ./
COPY api_schemas ./api_schemas
COPY core ./core
COPY app ./app
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin netgrad

# A numeric user, so that Kubernetes' runAsNonRoot can verify it.
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["netgrad", "probe", "livez"]
ENTRYPOINT ["netgrad"]
CMD ["serve"]
