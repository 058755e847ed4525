# One image for the web process and the workers.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=webapp.settings_production STORAGE_ROOT=/data

WORKDIR /app
COPY requirements.txt constraints.txt ./
# The CUDA build of PyTorch from PyPI (it runs on CPU-only hosts too); every other package at
# the version the test suite passed with.
RUN pip install --no-cache-dir -r requirements.txt -c constraints.txt

COPY . .
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput

EXPOSE 8000
CMD ["uvicorn", "webapp.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--ws", "websockets-sansio", "--proxy-headers"]
