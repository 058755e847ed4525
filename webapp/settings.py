"""Project settings, all from environment variables with working defaults for one machine.

DATABASE_URL   default sqlite:///<STORAGE_ROOT>/db.sqlite3
REDIS_URL      default redis://127.0.0.1:6379/0 (scripts/serve.py starts one if none answers)
STORAGE_ROOT   where corpora, tokenizers and checkpoints live (default ./var)
SECRET_KEY     required when DEBUG is off, unless <STORAGE_ROOT>/secret_key holds one (./run.sh writes it)
DEBUG          "1"/"true" turns on Django's debug pages and allows a development key (default off)
ALLOWED_HOSTS  comma-separated (default localhost,127.0.0.1,[::1])
UPLOAD_MAX_BYTES  largest upload accepted: a corpus or a labelled dataset (default 2 GB)
UPLOAD_MAX_DECOMPRESSED_BYTES  the most a gzip-compressed upload may unpack to (default 16 GiB; read by trainer.prep.corpus)
CORPUS_IMPORT_ROOTS  folders on the server that corpora may be imported from, os.pathsep-separated absolute paths (default none: no imports)
STORAGE_MIN_FREE_BYTES  free space kept on the storage volume: uploads and launches beyond it get a 507 (default 1 GiB)
NEIGHBOURS_MAX_TEXTS  the most texts of a dataset the explorer embeds for nearest neighbours (default 2000)
SERVE_HOST, SERVE_PUBLIC_HOST, SERVE_PORTS, SERVE_MAX_PER_USER  model servers (the Serve action: webapp/serving)
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url

import trainer


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


BASE_DIR = Path(__file__).resolve().parent.parent
STORAGE_ROOT = Path(os.environ.get("STORAGE_ROOT", BASE_DIR / "var")).resolve()

# Off unless asked for: the debug pages list every URL pattern and setting to whoever gets a 404 or
# a 500, which a shared lab machine must not show (./run.sh is how most people run the app).
DEBUG = env_bool("DEBUG", False)
SECRET_KEY_FILE = STORAGE_ROOT / "secret_key"  # written once by scripts/serve.py (./run.sh), mode 0600


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "").strip()
    if not key and SECRET_KEY_FILE.is_file():
        key = SECRET_KEY_FILE.read_text(encoding="utf-8").strip()
    if key:
        return key
    if DEBUG:
        return "insecure-local-development-key"
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"SECRET_KEY is not set and {SECRET_KEY_FILE} does not exist: set SECRET_KEY to a long random string "
        "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), or start the app once with ./run.sh, "
        "which writes one there. Only with DEBUG=1 does the app run on a development key.")


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

UPLOAD_MAX_BYTES = int(os.environ.get("UPLOAD_MAX_BYTES", str(2 * 1024**3)))


def _import_roots(value: str) -> list[Path]:
    """The folders corpora may be imported from (never copied: the corpus reads them in place)."""
    roots = []
    for part in value.split(os.pathsep):
        part = part.strip()
        if not part:
            continue
        if not os.path.isabs(part):
            raise RuntimeError(f"CORPUS_IMPORT_ROOTS must list absolute folders; {part!r} is relative.")
        roots.append(Path(part))
    return roots


# A corpus can be imported from a folder or glob under one of these (see trainer.prep.sources.resolve_import);
# none by default, and then the import form says an administrator must set it.
CORPUS_IMPORT_ROOTS = _import_roots(os.environ.get("CORPUS_IMPORT_ROOTS", ""))
# Uploads and launches are refused (507, with a sentence) when they would leave less free space.
STORAGE_MIN_FREE_BYTES = int(os.environ.get("STORAGE_MIN_FREE_BYTES", str(1024**3)))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by the app: /api/docs/ works offline
    "channels",
    "webapp.accounts",
    "webapp.jobs",  # the job rows, statuses and uploads the apps below share (abstract only: no tables)
    "webapp.corpora",
    "webapp.runs",
    "webapp.explorer",
    "webapp.datasets",
    "webapp.sweeps",
    "webapp.serving",  # model servers (`python -m trainer serve`), each a job on the serve queue
    "webapp.api",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "webapp.api.errors.DiskFullMiddleware",  # before the CSRF check, which reads the body (see its docstring)
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a refused sign-in into webapp.accounts.throttle's answer
]

# How many requests one web process runs at once: the lasting request threads of its HTTP handler
# (webapp/server/handler.py). The others wait on the event loop, taking no CPU from the websockets.
WEB_REQUEST_THREADS = int(os.environ.get("WEB_REQUEST_THREADS", "4"))

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{STORAGE_ROOT / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The web process and the workers write to one file. WAL lets readers go on while one
    # writes; IMMEDIATE transactions take the write lock when they begin, so two writers queue
    # on the busy timeout instead of one failing with "database is locked" when a read lock
    # cannot be upgraded.
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    })
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"

# Failed sign-ins (login form and POST /api/auth/token/) are throttled per account and per client
# address by django-axes; webapp/accounts/throttle.py says how, and answers a refused attempt.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a throttled attempt before the password is checked
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "10"))
LOGIN_COOLOFF_MINUTES = float(os.environ.get("LOGIN_COOLOFF_MINUTES", "5"))
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own: per account, and per address
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # attempts while refused do not extend the cool-off
AXES_LOCKOUT_CALLABLE = "webapp.accounts.throttle.lockout_response"
AXES_VERBOSE = False
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = STORAGE_ROOT / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request without it
WHITENOISE_USE_FINDERS = True  # serve straight from the finders: no collectstatic needed locally

# Uploads stream to disk in the storage folder, so finishing an upload is a rename.
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
FILE_UPLOAD_TEMP_DIR = str(STORAGE_ROOT / "tmp")
FILE_UPLOAD_HANDLERS = ["django.core.files.uploadhandler.TemporaryFileUploadHandler"]

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

CHANNEL_LAYERS = {
    "default": {
        # Redis pub/sub rather than channels_redis.core's list-based layer: that layer receives with
        # a blocking BZPOPMIN, and cancelling such a receive (every closed websocket cancels one)
        # now and then never finishes and keeps the layer's receive lock, so that no consumer of
        # the process receives again (reproduced with channels_redis 4.3 and redis-py 7.4 and 8.1:
        # about 1 in 40 cancellations of two concurrent receives). Events are live data: a
        # dashboard that was not listening reads them from the database (?after=), so pub/sub's
        # no-delivery-to-absent-listeners is what we want anyway.
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A pool process whose resident memory has passed this many KiB (Celery's unit) when its task ends
# is replaced by a fresh one: after a training run or the explorer's models a child held 1-1.5 GB
# while idle. Default 1 GiB (a fresh child with torch loaded holds a few hundred MB); 0 turns it off.
CELERY_WORKER_MAX_MEMORY_PER_CHILD = int(os.environ.get("WORKER_MAX_MEMORY_PER_CHILD", str(1024 * 1024))) or None
CELERY_TASK_DEFAULT_QUEUE = "cpu"
# Long runs outlive any visibility timeout; the Run row's atomic claim makes redelivery harmless.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 12 * 3600}
# Ride out a broker outage (a Redis restart): reconnect at start and after a lost connection,
# for as long as it takes, and keep running tasks going meanwhile (a training run must not be
# killed because Redis blinked). webapp/broker.py: kombu's Redis transport with the fix that keeps
# a worker alive when Redis goes away while a task is unacknowledged.
CELERY_BROKER_TRANSPORT = "webapp.broker:Transport"
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_CHANNEL_ERROR_RETRY = True
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

# The most processes over gloo a CPU worker starts for one run (it takes runs of up to this many
# devices: webapp/runs/capacity.py). A GPU worker gives its GPUs instead, counted as it starts
# (WORKER_GPUS overrides the count); docker-compose.yml runs one per machine with all its GPUs.
RUN_MAX_DEVICES = int(os.environ.get("RUN_MAX_DEVICES", "8"))
# Queue for runs whose device is "auto": "gpu" where the deployment has GPU workers.
RUN_DEFAULT_QUEUE = os.environ.get("RUN_DEFAULT_QUEUE", "cpu")
# Corpus ingest, tokenizer training and model imports: a queue and worker of their own, so
# they never wait behind training runs.
JOBS_QUEUE = "jobs"
# The most texts of a labelled dataset the explorer embeds for nearest-neighbour search (one job on
# the jobs queue per checkpoint, dataset and pooling; the page says the number).
NEIGHBOURS_MAX_TEXTS = int(os.environ.get("NEIGHBOURS_MAX_TEXTS", "2000"))
# The most runs one user may have queued or running at once (a 429 beyond it).
MAX_ACTIVE_RUNS_PER_USER = int(os.environ.get("MAX_ACTIVE_RUNS_PER_USER", "8"))
# The most combinations a grid sweep may have (the product of its settings' value counts,
# computed, never listed): Optuna's grid sampler builds every one of them in memory.
SWEEP_MAX_GRID = int(os.environ.get("SWEEP_MAX_GRID", "10000"))

# Model servers (webapp/serving): the Serve action starts `python -m trainer serve` on a checkpoint
# as a task of its own on the "serve" queue, which only the serve worker consumes (scripts/serve.py,
# docker-compose.yml's worker-serve); the task supervises the server until it is stopped.
SERVE_QUEUE = "serve"
SERVE_COMMAND = [sys.executable, "-m", "trainer", "serve"]  # the checkpoint and the options follow
# Where a server listens (on the serve worker's machine), and the host name clients are shown
# ("" = the listen host, or the worker's host name when it listens on every interface).
SERVE_HOST = os.environ.get("SERVE_HOST", "127.0.0.1")
SERVE_PUBLIC_HOST = os.environ.get("SERVE_PUBLIC_HOST", "")
# The ports servers may listen on, e.g. "8100-8109" (a container publishes them); "" = any free port.
SERVE_PORTS = os.environ.get("SERVE_PORTS", "")
# The most servers one user may have live at once (a 429 beyond it).
SERVE_MAX_PER_USER = int(os.environ.get("SERVE_MAX_PER_USER", "3"))
SERVE_START_TIMEOUT_S = int(os.environ.get("SERVE_START_TIMEOUT_S", "600"))  # to load the model and listen
SERVE_STOP_GRACE_S = float(os.environ.get("SERVE_STOP_GRACE_S", "10"))  # SIGTERM, then SIGKILL after this
SERVE_HEARTBEAT_S = 10.0  # how often a supervisor writes seen_at
SERVE_HEARTBEAT_TIMEOUT_S = int(os.environ.get("SERVE_HEARTBEAT_TIMEOUT_S", "60"))  # then it counts as dead

# The CPU priority (nice value, 0-19) Celery workers lower themselves to at start (webapp/celery.py):
# where training shares the cores with the web server, pages, the API and live events go first.
# 0 leaves the priority the worker was started with.
WORKER_NICENESS = int(os.environ.get("WORKER_NICENESS", "10"))

# A run whose heartbeat is older than this is marked crashed.
RUN_HEARTBEAT_TIMEOUT_S = int(os.environ.get("RUN_HEARTBEAT_TIMEOUT_S", "120"))
# How often Celery beat sends the reaper that does it (pages and the API only read).
RUN_REAP_EVERY_S = int(os.environ.get("RUN_REAP_EVERY_S", "60"))

# Periodic jobs. Celery beat sends them to the "maintenance" queue (webapp/celery.py routes), which
# a small worker of its own consumes, so a training worker whose slots are all busy never holds
# them up: `celery worker -B -Q maintenance` (started by scripts/serve.py; docker-compose.yml's
# scheduler service).
CELERY_BEAT_SCHEDULE = {
    "reap-stale-runs": {
        "task": "webapp.runs.tasks.reap_stale_runs",
        "schedule": RUN_REAP_EVERY_S,
        "options": {"expires": RUN_REAP_EVERY_S},  # one not taken by then is dropped, not piled up
    },
    "reap-servers": {  # model servers whose worker died are marked failed (webapp.serving.services)
        "task": "webapp.serving.tasks.reap_servers",
        "schedule": RUN_REAP_EVERY_S,
        "options": {"expires": RUN_REAP_EVERY_S},
    },
    "advance-sweeps": {  # a safety net: sweeps advance when a trial's run ends (webapp.sweeps.tasks)
        "task": "webapp.sweeps.tasks.advance_sweeps",
        "schedule": RUN_REAP_EVERY_S,
        "options": {"expires": RUN_REAP_EVERY_S},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(STORAGE_ROOT / "celerybeat-schedule")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON bodies must be objects (a body of null was a 500); forms and uploads as usual.
    "DEFAULT_PARSER_CLASSES": [
        "webapp.api.parsers.JSONObjectParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "webapp.api.schema.AutoSchema",  # the schema states the real constraints
    "EXCEPTION_HANDLER": "webapp.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "LM Workbench API",
    "DESCRIPTION": ("Upload corpora, train tokenizers, launch and follow pretraining runs, explore checkpoints; "
                    "upload and map labelled datasets for fine-tuning."),
    "VERSION": trainer.__version__,
    # The JSON endpoints are documented as JSON: a form encoding cannot carry their nested objects,
    # lists and types (they still read forms). Uploads name multipart/form-data themselves.
    "PARSER_WHITELIST": ["webapp.api.parsers.JSONObjectParser"],
    # Swagger UI from the installed package (drf-spectacular-sidecar), not a CDN: the page renders offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_INCLUDE_SCHEMA": False,  # /api/schema/ itself is not an operation of the API
    # Sweeps' enums share field names (kind, status) with runs': each set of values gets its own name.
    "ENUM_NAME_OVERRIDES": {
        "RunKindEnum": "webapp.runs.models.RunKind",  # a sweep's kind is the kind of its runs
        "SweepStatusEnum": "webapp.sweeps.models.SweepStatus",
        "TrialStateEnum": "webapp.sweeps.models.TrialState",
        "SweepDirectionEnum": "webapp.sweeps.models.Direction",
        "SweepSamplerEnum": "webapp.sweeps.models.Sampler",
        "SweepPrunerEnum": "webapp.sweeps.models.Pruner",
        "DecodingStrategyEnum": "webapp.explorer.services.STRATEGIES",  # the generator's, not a dataset split's
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # django-axes logs every sign-in at INFO; its warnings (a failure, a lockout) are what an operator reads.
    "loggers": {"axes": {"level": "WARNING"}},
}

if os.environ.get("TEST_DATABASE_NAME"):
    # Set by the test suite so that two test sessions on one server never share a database.
    DATABASES["default"]["TEST"] = {"NAME": os.environ["TEST_DATABASE_NAME"]}
elif DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file (not memory) for the test database, so worker processes started by the tests share it.
    DATABASES["default"]["TEST"] = {"NAME": str(STORAGE_ROOT / "test-db.sqlite3")}
