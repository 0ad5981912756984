"""qassist settings: every knob is an environment variable with an embedded default.

Embedded default: SQLite in var/, no Redis (in-memory channel layer, the inference engine on a
thread of the web process, Celery on a filesystem broker). Production: set DATABASE_URL and
REDIS_URL and run `manage.py run_inference_worker` on each machine.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext

from qassist.env import env_bool, env_float, env_int, env_list, env_str, load_or_create_secret_key

django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("QASSIST_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
# Unset: a random key is made once and kept in var/secret_key, so sessions and API keys
# survive restarts of an embedded install. Several machines must share one SECRET_KEY.
SECRET_KEY = env_str("SECRET_KEY", "") or load_or_create_secret_key(VAR_DIR / "secret_key")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "qassist.apps.QassistAdminConfig",  # django.contrib.admin with qassist's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "qassist",
    "tenants",
    "chat",
    "inference",
    "knowledge",
    "signin",  # single sign-on through the company's identity provider (OpenID Connect)
    "feedback",
    "sharing",
    "sources",  # synced sources of company knowledge (folders, intranet sites, WebDAV)
    "qassist.apps.SignInConfig",  # django-axes, named for people
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "qassist.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "qassist.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "signin.middleware.ProviderSessionMiddleware",  # sessions from the IdP re-checked when due
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: answers a locked-out login with a 429 page
]

ROOT_URLCONF = "qassist.urls"
ASGI_APPLICATION = "qassist.asgi.application"
WSGI_APPLICATION = None

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

DATABASE_URL = env_str("DATABASE_URL", "") or f"sqlite:///{VAR_DIR / 'qassist.sqlite3'}"
try:
    # Connections are kept for a minute, and checked before a request reuses one: after the
    # database restarts, the next request reconnects instead of failing on a dead connection.
    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
    }
except ValueError:  # reported by the system check qassist.E005, not a traceback here
    DATABASES = {"default": {"ENGINE": "django.db.backends.dummy"}}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the chat stream write while the admin reads; a busy timeout instead of "locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Under ASGI every sync call may run on a thread of its own, and a connection kept per
    # thread would pile up (Django's advice: no persistent connections, or a pool). A pool of
    # psycopg connections, checked before reuse (CONN_HEALTH_CHECKS), is shared by the
    # process's threads instead.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": env_int("QASSIST_DB_POOL_SIZE", 10),
        "timeout": 10,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# --- Login lockout (django-axes): /accounts/login/ and the admin's login -----------------------
# qassist/login_lockout.py: a username is locked from one address (the pair) after
# QASSIST_LOGIN_FAILURE_LIMIT failed logins, never everywhere; an address after
# QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT failures for any usernames; a username failing from many
# addresses is slowed down for the addresses that failed, never for a new one. Locks last
# QASSIST_LOGIN_LOCKOUT_MINUTES after the last counted failure; attempts refused meanwhile are not
# counted. Failures are stored in the database (works without Redis) and logged. Behind a proxy,
# run daphne with --proxy-headers so REMOTE_ADDR is the client's address, not the proxy's.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "qassist.login_lockout.LoginLockoutHandler"
AXES_LOCKOUT_CALLABLE = "qassist.login_lockout.lockout_response"
AXES_FAILURE_LIMIT = env_int("QASSIST_LOGIN_FAILURE_LIMIT", 10)
QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT", 50)
QASSIST_LOGIN_USER_THROTTLE_SECONDS = env_float("QASSIST_LOGIN_USER_THROTTLE_SECONDS", 10.0)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("QASSIST_LOGIN_LOCKOUT_MINUTES", 15))
# What axes itself filters by: the pair. A successful login clears that pair's failures only
# (clearing the address's would let an attacker with an account of their own reset it).
AXES_LOCKOUT_PARAMETERS: list[str | list[str]] = [["username", "ip_address"]]
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # trying during a lockout never extends it
AXES_RESET_ON_SUCCESS = True
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]  # never trust a client's X-Forwarded-For
AXES_VERBOSE = True
AXES_ENABLE_ADMIN = False  # qassist/admin.py lists the records, read-only, under human names
AXES_SENSITIVE_PARAMETERS: list[str] = []  # log who and from where; passwords stay masked

# --- Single sign-on: OpenID Connect, authorization code with PKCE (signin/, docs/deploy.md) -------
# On when an issuer and a client id are set; local passwords keep working beside it.
QASSIST_OIDC_ISSUER = env_str("QASSIST_OIDC_ISSUER", "")
QASSIST_OIDC_CLIENT_ID = env_str("QASSIST_OIDC_CLIENT_ID", "")
QASSIST_OIDC_CLIENT_SECRET = env_str("QASSIST_OIDC_CLIENT_SECRET", "")  # empty: a public client
QASSIST_OIDC_SCOPES = env_str("QASSIST_OIDC_SCOPES", "openid profile email")
QASSIST_OIDC_NAME = env_str("QASSIST_OIDC_NAME", "your company account")  # "Sign in with ..."
QASSIST_OIDC_GROUPS_CLAIM = env_str("QASSIST_OIDC_GROUPS_CLAIM", "groups")
QASSIST_OIDC_USERNAME_CLAIM = env_str("QASSIST_OIDC_USERNAME_CLAIM", "preferred_username")
# A session from the provider goes on this long before the provider must vouch for it again
# (its refresh token is used: a person disabled there, or whose groups changed, is seen then).
QASSIST_OIDC_RECHECK_SECONDS = env_int("QASSIST_OIDC_RECHECK_SECONDS", 900)
# While the provider cannot be reached, sessions go on this long after their last good check.
QASSIST_OIDC_OUTAGE_GRACE_SECONDS = env_int("QASSIST_OIDC_OUTAGE_GRACE_SECONDS", 3600)
QASSIST_OIDC_TIMEOUT_SECONDS = env_float("QASSIST_OIDC_TIMEOUT_SECONDS", 5.0)
# A refused renewal switches the account off and revokes the API keys its owner created.
QASSIST_OIDC_REFUSAL_OFFBOARDS = env_bool("QASSIST_OIDC_REFUSAL_OFFBOARDS", True)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat:index"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
# ISO 8601 dates and a 24-hour clock in the admin and the pages (qassist/formats/en).
FORMAT_MODULE_PATH = ["qassist.formats"]
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# Served by WhiteNoise from daphne itself; straight from static/ and the apps when nobody ran
# collectstatic (tests, a fresh checkout), from STATIC_ROOT when someone did.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns about a missing one
WHITENOISE_AUTOREFRESH = DEBUG

# --- Redis: channel layer, Celery broker, rate-limit counters, engine transport -------------
REDIS_URL = env_str("REDIS_URL", "")
QASSIST_REDIS_PREFIX = env_str("QASSIST_REDIS_PREFIX", "qassist")  # one per deployment
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": f"{QASSIST_REDIS_PREFIX}:layer"},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    # A worker asks Redis for its queues in the order it was given them (not round robin).
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"queue_order_strategy": "priority"}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(VAR_DIR / "celery" / "queue"),
        "data_folder_out": str(VAR_DIR / "celery" / "queue"),
        "processed_folder": str(VAR_DIR / "celery" / "processed"),
        # Where a sender (the web process queueing an import or an indexing) keeps kombu's
        # exchange table; by default a `control` folder in the current directory.
        "control_folder": str(VAR_DIR / "celery" / "control"),
        "store_processed": False,
    }
# Queues, which every worker takes in this order (`-Q interactive,celery,knowledge,batches`,
# Procfile): what people wait for (drafts on the admin page, a file attached to a
# conversation), then beat's housekeeping, then the knowledge base's documents (one task per
# document: thousands queue there without delaying the rest), then batch runs. A batch runner
# gives way between items to a waiting draft (chat/batches.py). docs/batches.md.
CELERY_QUEUES_IN_ORDER = ("interactive", "celery", "knowledge", "batches")
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    "chat.tasks.draft_cached_reply_answer": {"queue": "interactive"},
    "chat.tasks.run_batch": {"queue": "batches"},
    "knowledge.tasks.index_document": {"queue": "knowledge"},  # attachments: interactive
    # A sync's slices wait behind the documents it queued for indexing: a source reaches
    # "ready" document by document, and never holds the worker longer than a slice.
    "sources.tasks.sync_source": {"queue": "knowledge"},
}
# A worker reserves no message beyond the one it runs: the next is chosen when it is free, by
# queue order, not fetched ahead in arrival order.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "interrupt-stale-replies": {"task": "chat.tasks.interrupt_stale_replies", "schedule": 30.0},
    "rollup-usage": {"task": "tenants.tasks.rollup_usage", "schedule": 3600.0},
    "resume-batches": {"task": "chat.tasks.resume_batches", "schedule": 30.0},
    "dispatch-documents": {"task": "knowledge.tasks.dispatch_pending", "schedule": 60.0},
    "resume-imports": {"task": "chat.tasks.resume_cached_reply_imports", "schedule": 60.0},
    # Sources due are synced, and syncs whose task died are taken over (sources/tasks.py).
    "sync-sources": {"task": "sources.tasks.sources_tick", "schedule": 30.0},
}

# --- The model and the inference engine ------------------------------------------------------
QASSIST_MODEL = env_str("QASSIST_MODEL", "smollm2-135m")  # a registry name or a .gguf path
# The models this deployment serves (issue #36), comma-separated: embedded mode loads an engine
# for each, the web process counts each one's prompts with its own vocabulary. QASSIST_MODEL
# is the default (a request naming no model) and is always one of them, listed or not
# (`tenants.services.deployment_models`); in Redis mode the workers' `--model` decide what is
# served, and this list says which vocabularies to load and which models tenants may be given.
QASSIST_MODELS = [m.strip() for m in env_str("QASSIST_MODELS", "").split(",") if m.strip()]
# What one token of a model counts for in tenants' quotas and tokens-per-minute limits (issue
# #36), comma-separated name=weight, e.g. "qwen2.5-coder-1.5b=3": a 1.5B token costs the machine
# about three 0.5B tokens. A model not listed counts 1 (so nothing changes unless this is set).
QASSIST_MODEL_TOKEN_WEIGHTS = env_str("QASSIST_MODEL_TOKEN_WEIGHTS", "")
QASSIST_MODELS_DIR = Path(env_str("QASSIST_MODELS_DIR", str(BASE_DIR / "models")))
QASSIST_MAX_SEQ_TOKENS = env_int("QASSIST_MAX_SEQ_TOKENS", 4096)  # one conversation's limit
# One pool of QASSIST_CONTEXT_SIZE KV cells shared by all sequences (shared prefixes cost
# nothing; every token's attention visits every sequence's cells). Off: a stream of
# QASSIST_MAX_SEQ_TOKENS cells per sequence (12 KB a cell for Qwen2.5-0.5B), faster where
# conversations' own histories dominate, slower for bursts of new prompts (docs/engine.md).
QASSIST_KV_UNIFIED = env_bool("QASSIST_KV_UNIFIED", True)
QASSIST_CONTEXT_SIZE = env_int("QASSIST_CONTEXT_SIZE", 32768)  # the unified pool's cells
# The most sequences decoded together; how many actually are is the speed floor's choice.
QASSIST_PARALLEL = env_int("QASSIST_PARALLEL", 48)
# Tokens/s every running stream keeps at least (reading speed); 0 runs QASSIST_PARALLEL always.
QASSIST_MIN_STREAM_SPEED = env_float("QASSIST_MIN_STREAM_SPEED", 5.0)
# The floor is a preference: once a request has waited this long for its start (0: never), more
# streams run, down to QASSIST_MIN_STREAM_SPEED_HARD tokens/s each (0: up to QASSIST_PARALLEL).
QASSIST_TTFT_TARGET_SECONDS = env_float("QASSIST_TTFT_TARGET_SECONDS", 2.0)
QASSIST_MIN_STREAM_SPEED_HARD = env_float("QASSIST_MIN_STREAM_SPEED_HARD", 2.5)
# Waiting requests: "fair" (weighted fair share between tenants), "priority" or "fcfs".
QASSIST_QUEUE_POLICY = env_str("QASSIST_QUEUE_POLICY", "fair")
QASSIST_QUEUE_AGING_SECONDS = env_float("QASSIST_QUEUE_AGING_SECONDS", 30.0)  # then oldest first
QASSIST_MAX_WAIT_SECONDS = env_float("QASSIST_MAX_WAIT_SECONDS", 90.0)  # then "busy"
# Host memory for the KV of idle conversations whose sequence was taken (0 turns it off).
QASSIST_HOST_CACHE_MB = env_int("QASSIST_HOST_CACHE_MB", 1024)
# Beyond that, on disk (0 turns it off); kept across worker restarts for the same model file.
QASSIST_HOST_CACHE_DISK_MB = env_int("QASSIST_HOST_CACHE_DISK_MB", 4096)
# An idle conversation's KV leaves its sequence for host memory after this many engine steps
# (about 0.1 s each): kept in llama.cpp's pool it slows every running stream. 0 keeps it there
# until the sequence is needed.
QASSIST_PARK_IDLE_STEPS = env_int("QASSIST_PARK_IDLE_STEPS", 10)
# Pack llama.cpp's KV pool when freed cells leave holes that every token would still visit
# (off only to measure what it gains).
QASSIST_KV_COMPACT = env_bool("QASSIST_KV_COMPACT", True)
QASSIST_HOST_CACHE_DIR = env_str("QASSIST_HOST_CACHE_DIR", str(VAR_DIR / "kvcache"))
# Passage KV computed once (docs/engine.md, "Passages computed once"): each passage of company
# knowledge computed after the tenant's system prompt when it is indexed (or when the engine is
# idle), kept in memory and on disk, and placed into the questions that carry it.
QASSIST_PASSAGE_KV = env_bool("QASSIST_PASSAGE_KV", False)
QASSIST_PASSAGE_KV_MB = env_int("QASSIST_PASSAGE_KV_MB", 512)
QASSIST_PASSAGE_KV_DISK_MB = env_int("QASSIST_PASSAGE_KV_DISK_MB", 8192)
QASSIST_PASSAGE_KV_DIR = env_str("QASSIST_PASSAGE_KV_DIR", str(VAR_DIR / "passagekv"))
# Tokens at the start of each placed passage computed again in place, where they attend to the
# passages before them (0: none).
QASSIST_PASSAGE_KV_RECOMPUTE = env_int("QASSIST_PASSAGE_KV_RECOMPUTE", 0)
# Besides loopback and staff, who may read GET /metrics (CIDR networks, e.g. 10.0.0.0/8).
QASSIST_METRICS_NETWORKS = env_list("QASSIST_METRICS_NETWORKS", "")
QASSIST_THREADS = env_int("QASSIST_THREADS", os.cpu_count() or 2)
# Engines sharing this host's cores take turns, a step each (inference/budget.py): "auto" (on when
# more than one model is configured, QASSIST_MODEL + QASSIST_MODELS), "on" or "off". Across
# processes (a worker per model) the turn is kept in lock files in QASSIST_CPU_BUDGET_DIR.
QASSIST_CPU_BUDGET = env_str("QASSIST_CPU_BUDGET", "auto")
QASSIST_CPU_BUDGET_DIR = env_str("QASSIST_CPU_BUDGET_DIR", str(VAR_DIR / "cpu"))
# How much the engine's threads lower their CPU priority (Unix nice, 0-19; 0 leaves it): where
# the engine shares cores with web processes, a request's own work (admission, a refusal, its
# first token's trip to the client) runs first and waits less for a step's computation.
QASSIST_ENGINE_NICE = env_int("QASSIST_ENGINE_NICE", 5)
QASSIST_BATCH_TOKENS = env_int("QASSIST_BATCH_TOKENS", 256)  # token budget of one engine step
# Prompt tokens still to compute above which a long uncached prompt waits in the queue
# (docs/engine.md, "Admit"); 0: one step's budget (QASSIST_BATCH_TOKENS).
QASSIST_PREFILL_BACKLOG = env_int("QASSIST_PREFILL_BACKLOG", 0)
QASSIST_MAX_QUEUE = env_int("QASSIST_MAX_QUEUE", 64)  # requests waiting beyond the running ones
QASSIST_DEFAULT_MAX_TOKENS = env_int("QASSIST_DEFAULT_MAX_TOKENS", 512)
QASSIST_DEFAULT_TEMPERATURE = env_float("QASSIST_DEFAULT_TEMPERATURE", 0.7)
# After a new conversation's first reply, ask the model (at low priority) for a short title.
QASSIST_GENERATE_TITLES = env_bool("QASSIST_GENERATE_TITLES", True)
# A reply keeps the language the person's instructions name, else the question's
# (chat/reply_language.py): said after each question, and a reply whose start is in another
# language is asked once more. Off: neither (bench/language.py measures both).
QASSIST_REPLY_LANGUAGE = env_bool("QASSIST_REPLY_LANGUAGE", True)
# Without Redis, how often a process checks whether another process changed cached replies.
QASSIST_CACHED_REPLY_CHECK_SECONDS = env_float("QASSIST_CACHED_REPLY_CHECK_SECONDS", 5.0)
# Batch jobs (chat/batches.py).
QASSIST_BATCH_MAX_ITEMS = env_int("QASSIST_BATCH_MAX_ITEMS", 1000)
# Items of one batch in flight at once. Each background sequence decoding lengthens every engine
# step, which a person's question arriving meanwhile waits for: 2 kept their first token within
# 1.5x of idle while a batch ran (4: 1.45-1.61x at the median); a batch takes ~30% longer.
QASSIST_BATCH_CONCURRENCY = env_int("QASSIST_BATCH_CONCURRENCY", 2)
QASSIST_BATCH_STALE_SECONDS = env_float("QASSIST_BATCH_STALE_SECONDS", 30.0)
QASSIST_BATCH_SLICE_SECONDS = env_float("QASSIST_BATCH_SLICE_SECONDS", 300.0)
# A CSV import of cached replies may be this large and hold this many rows (a clear refusal
# above); files of more than chat.cached_reply_csv.IMPORT_INLINE_MAX_ROWS rows run in the
# background.
QASSIST_CACHED_REPLY_IMPORT_MAX_MB = env_int("QASSIST_CACHED_REPLY_IMPORT_MAX_MB", 10)
QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS = env_int("QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS", 50_000)
# A first-turn question asked this often (per tenant) is listed as a cached-reply candidate.
QASSIST_CANDIDATE_MIN_COUNT = env_int("QASSIST_CANDIDATE_MIN_COUNT", 2)
QASSIST_WORKER_HEARTBEAT_SECONDS = env_int("QASSIST_WORKER_HEARTBEAT_SECONDS", 5)
# A reply held to a JSON Schema or a tool call: its grammar may take this long in one engine
# step (a whole-vocabulary check takes 0.15-0.35 s on 2 busy cores); past it the request ends
# alone with `grammar_too_slow` (0: unbounded).
QASSIST_GRAMMAR_STEP_SECONDS = env_float("QASSIST_GRAMMAR_STEP_SECONDS", 2.0)
# The watchdog: an engine step running this long marks the engine unhealthy in /healthz and
# /metrics (a step is about 0.1 s; a long prompt's chunk a second or two on a busy machine).
QASSIST_ENGINE_STALL_SECONDS = env_float("QASSIST_ENGINE_STALL_SECONDS", 30.0)
# With several workers, a conversation's next turn waits this long for the worker that holds its
# history's KV before any other takes it (and computes the history again); 0: any worker at once.
QASSIST_CONVERSATION_AFFINITY_SECONDS = env_float("QASSIST_CONVERSATION_AFFINITY_SECONDS", 1.0)
# --- Tenant limits and access ------------------------------------------------------------------
# A running reply holds a concurrent-stream slot as a lease the streaming process renews; a
# process that dies leaves slots that expire after this many seconds.
QASSIST_STREAM_LEASE_SECONDS = env_int("QASSIST_STREAM_LEASE_SECONDS", 30)
# Concurrent streams one person (browser) or one API key may hold, within the tenant's limit.
QASSIST_USER_MAX_STREAMS = env_int("QASSIST_USER_MAX_STREAMS", 4)
QASSIST_API_KEY_MAX_STREAMS = env_int("QASSIST_API_KEY_MAX_STREAMS", 16)
# Websockets one user may hold open in one web process.
QASSIST_WS_MAX_PER_USER = env_int("QASSIST_WS_MAX_PER_USER", 20)
# An open websocket re-checks its login and membership this often (seconds).
QASSIST_WS_RECHECK_SECONDS = env_int("QASSIST_WS_RECHECK_SECONDS", 5)
# A chat reply goes on without any open socket of its user for this long, then stops.
QASSIST_REPLY_GRACE_SECONDS = env_float("QASSIST_REPLY_GRACE_SECONDS", 60.0)
# A conversation longer than this (all messages, in characters) is refused before it is
# tokenised: a huge history cannot tie up a web process.
QASSIST_MAX_CONVERSATION_CHARS = env_int("QASSIST_MAX_CONVERSATION_CHARS", 200_000)

# --- Company knowledge (knowledge/, docs/knowledge.md) -----------------------------------------
# The embedding model: use-multilingual-v3 (in-process, numpy) or a GGUF embedding model.
QASSIST_EMBEDDING_MODEL = env_str("QASSIST_EMBEDDING_MODEL", "use-multilingual-v3")
QASSIST_EMBEDDING_THREADS = env_int("QASSIST_EMBEDDING_THREADS", 1)
# Uploads: one file's limit, a tenant's default storage (admins set each tenant's own), and
# what one person may attach to their conversations in all.
QASSIST_KNOWLEDGE_MAX_FILE_MB = env_int("QASSIST_KNOWLEDGE_MAX_FILE_MB", 50)
QASSIST_KNOWLEDGE_STORAGE_MB = env_int("QASSIST_KNOWLEDGE_STORAGE_MB", 500)
QASSIST_ATTACHMENTS_MAX_MB = env_int("QASSIST_ATTACHMENTS_MAX_MB", 20)
QASSIST_KNOWLEDGE_MAX_PAGES = env_int("QASSIST_KNOWLEDGE_MAX_PAGES", 2000)
# Each document is parsed in a child process with at most this much memory and time
# (knowledge/parsers/sandbox.py): a file that needs more fails with a reason, the worker stays.
QASSIST_KNOWLEDGE_PARSE_MEMORY_MB = env_int("QASSIST_KNOWLEDGE_PARSE_MEMORY_MB", 1024)
QASSIST_KNOWLEDGE_PARSE_SECONDS = env_float("QASSIST_KNOWLEDGE_PARSE_SECONDS", 300.0)
# Passages a question is given: at most this many, within this many tokens of the chat model.
QASSIST_KNOWLEDGE_PASSAGES = env_int("QASSIST_KNOWLEDGE_PASSAGES", 3)
QASSIST_KNOWLEDGE_PASSAGE_TOKENS = env_int("QASSIST_KNOWLEDGE_PASSAGE_TOKENS", 900)
# Below this similarity of the best passage the documents are taken not to answer the question
# (docs/knowledge.md says how it was calibrated; a rare word match as a second way in was
# measured and not kept: docs/BENCHMARKS.md, "Trust", 2026-12-07).
QASSIST_KNOWLEDGE_MIN_SCORE = env_float("QASSIST_KNOWLEDGE_MIN_SCORE", 0.15)
# Decline before generation below this fused answerability probability (knowledge.answerability;
# 0: never, the measured best on qwen2.5-coder-0.5b: docs/BENCHMARKS.md, "Trust").
QASSIST_KNOWLEDGE_PRECHECK = env_float("QASSIST_KNOWLEDGE_PRECHECK", 0.0)
# Synced sources (sources/, docs/knowledge.md "Sources"): the folders a folder source may be
# under (none: folder sources are refused), networks no website or WebDAV source may reach
# (link-local: where cloud machines serve their credentials), how long one Celery task works
# on a sync before it queues the rest, and how long a silent one holds it.
QASSIST_SOURCE_FOLDERS = env_list("QASSIST_SOURCE_FOLDERS", "")
QASSIST_SOURCE_BLOCKED_NETWORKS = env_list(
    "QASSIST_SOURCE_BLOCKED_NETWORKS", "169.254.0.0/16,fe80::/10"
)
QASSIST_SOURCE_SLICE_SECONDS = env_float("QASSIST_SOURCE_SLICE_SECONDS", 30.0)
QASSIST_SOURCE_LEASE_SECONDS = env_float("QASSIST_SOURCE_LEASE_SECONDS", 60.0)
# The Celery worker lowers its CPU priority by this much when it starts (0: it does not): its
# work is all background, and people's first tokens come first (qassist/celery.py).
QASSIST_CELERY_NICE = env_int("QASSIST_CELERY_NICE", 19)

# "auto": a separate worker when REDIS_URL is set, the in-process engine otherwise.
QASSIST_ENGINE = env_str("QASSIST_ENGINE", "auto")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"one_line": {"()": "qassist.logging.OneLineWarning"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        # Bad Host headers, too many form fields...: anyone can send them; one line each.
        "security": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["one_line"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "django.security": {"handlers": ["security"], "level": "WARNING", "propagate": False},
    },
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
CSRF_FAILURE_VIEW = "qassist.views.csrf_failure"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# --- Production: one switch for a site served over HTTPS (docs/deploy.md) --------------------
# QASSIST_HTTPS=1 when users reach qassist over HTTPS, through a TLS-terminating proxy that
# sets X-Forwarded-Proto (and overwrites one sent by the client). Then cookies are secure,
# plain-HTTP requests are redirected (except /healthz, for load balancers), HSTS is sent, and
# the CSP allows websockets over wss: only.
QASSIST_HTTPS = env_bool("QASSIST_HTTPS", False)
if QASSIST_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    _proxy_header = env_str("QASSIST_PROXY_SSL_HEADER", "X-Forwarded-Proto")
    if _proxy_header:
        SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https")
