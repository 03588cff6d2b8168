# One image for every role; the role is the command (see docker-compose.yml).
# Docker does not run on the development machine: this file is kept correct by reading.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FITTEST_DATA_DIR=/data \
    FITTEST_TOOLS_DIR=/app/examples/tools \
    FITTEST_EMBEDDING_MODEL_PATH=/models/all-MiniLM-L6-v2-onnx

# tini as PID 1 forwards signals and reaps whatever orphan reaches it (PID 1 in a container does not
# by default); the runners reap the processes of their tools themselves.
RUN apt-get update && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY selection ./selection
COPY evolution ./evolution
COPY workers ./workers
COPY fittest ./fittest
COPY examples ./examples
COPY Procfile ./
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 1000 fittest \
    && mkdir -p /data && chown fittest /data
USER fittest
VOLUME ["/data"]

ENTRYPOINT ["tini", "--"]
CMD ["celery", "-A", "workers.app", "worker", "-Q", "selection,feedback,learning", "-P", "threads", "-c", "4"]
