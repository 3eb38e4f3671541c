# Alfred: one image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies in their own layer, so a code change does not reinstall them: exactly the
# runtime lock (`make lock`), every file checked against its hash. The code then runs from
# /app (PYTHONPATH), beside manage.py and templates/.
COPY requirements/runtime.lock ./requirements/
RUN pip install --require-hashes --no-deps -r requirements/runtime.lock

# Explicit paths: no .venv/, .alfred/, .git/ or tests in the image.
COPY manage.py ./
COPY templates ./templates
COPY alfred ./alfred
COPY executions ./executions
COPY lanes ./lanes
COPY providers ./providers
COPY workflows ./workflows
COPY delivery ./delivery

# Static files for WhiteNoise, collected with the production storage (hashed names, manifest).
# These values exist only so that the production settings load during the build.
RUN ALFRED_ENV=production \
    ALFRED_SECRET_KEY=build-only-collectstatic-not-a-secret-0123456789abcdefghij \
    ALFRED_PUBLIC_URL=https://build.invalid \
    DATABASE_URL=postgresql://build@build.invalid/build \
    CELERY_BROKER_URL=redis://build.invalid:6379/0 \
    python manage.py collectstatic --noinput

RUN useradd --system --uid 10001 --no-create-home --home-dir /app --shell /usr/sbin/nologin alfred
USER alfred

EXPOSE 8000
CMD ["python", "-m", "uvicorn", "alfred.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--lifespan", "on", "--timeout-graceful-shutdown", "20", "--no-proxy-headers"]
