# netgrad service image: `docker build -t netgrad . && docker run -p 8000:8000 netgrad`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/netgrad
COPY pyproject.toml README.md ./
COPY api_schemas ./api_schemas
COPY core ./core
COPY app ./app
RUN pip install . \
    && useradd --system --no-create-home --shell /usr/sbin/nologin netgrad

USER netgrad
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"
CMD ["netgrad", "serve", "--host", "0.0.0.0"]
