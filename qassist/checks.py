"""Configuration problems are reported here, with stable ids, instead of at first request.

qassist.E001 llama-cpp-python missing or built with AMX
qassist.E002 an engine size or sampling setting is malformed or inconsistent
qassist.E003 QASSIST_ENGINE or REDIS_URL is unusable
qassist.E004 QASSIST_MODEL (or an entry of QASSIST_MODELS) names no known model and no .gguf file
qassist.E005 DATABASE_URL cannot be parsed
qassist.E006 a login lockout setting is malformed
qassist.E007 a scheduling setting (queue policy, aging, wait bound, speed floor, host cache) is bad
qassist.E008 QASSIST_MODEL_TOKEN_WEIGHTS is not name=weight,... with weights above 0
qassist.E009 QASSIST_CPU_BUDGET is not auto, on or off
qassist.W001 the configured model is not on disk yet
qassist.W006 QASSIST_LOGIN_LOCKOUT_BY is set but no longer read
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from inference import modelstore

POSITIVE_INT_SETTINGS = (
    "QASSIST_CONTEXT_SIZE",
    "QASSIST_MAX_SEQ_TOKENS",
    "QASSIST_PARALLEL",
    "QASSIST_THREADS",
    "QASSIST_BATCH_TOKENS",
    "QASSIST_MAX_QUEUE",
    "QASSIST_DEFAULT_MAX_TOKENS",
    "QASSIST_WORKER_HEARTBEAT_SECONDS",
    "QASSIST_STREAM_LEASE_SECONDS",
    "QASSIST_USER_MAX_STREAMS",
    "QASSIST_API_KEY_MAX_STREAMS",
    "QASSIST_WS_RECHECK_SECONDS",
    "QASSIST_WS_MAX_PER_USER",
    "QASSIST_MAX_CONVERSATION_CHARS",
    "QASSIST_CACHED_REPLY_IMPORT_MAX_MB",
    "QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS",
)
MAX_PARALLEL = 256  # llama.cpp's LLAMA_MAX_SEQ
MAX_NICE = 19  # the lowest CPU priority a Unix thread can take
MAX_TEMPERATURE = 2.0  # OpenAI's range, which clients of the REST API expect
ENGINE_MODES = ("auto", "embedded", "redis")
REDIS_SCHEMES = ("redis", "rediss", "unix")
REBUILD_HINT = (
    "Run `make install`: it builds llama-cpp-python 0.3.36 without AMX into "
    "~/.cache/qassist/wheels/noamx and installs that wheel (see the Makefile)."
)

AppConfigs = Sequence[AppConfig] | None


def llama_system_info() -> str:
    """llama.cpp's compile-time feature list; raises ImportError without llama-cpp-python."""
    import llama_cpp

    return str(llama_cpp.llama_print_system_info().decode("utf-8", errors="replace"))


@register("qassist")
def check_llama_cpp(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        info = llama_system_info()
    except Exception as exc:  # ImportError, or OSError when the shared library cannot load
        return [
            Error(
                f"llama-cpp-python cannot be loaded: {exc}",
                hint=REBUILD_HINT,
                id="qassist.E001",
            )
        ]
    if "AMX_INT8" in info:
        return [
            Error(
                "llama-cpp-python was built with AMX (its system info reports AMX_INT8); "
                "qassist runs llama.cpp built without AMX.",
                hint=REBUILD_HINT,
                id="qassist.E001",
            )
        ]
    return []


def _shown(name: str, value: object) -> str:
    """The value as the user wrote it: env_int keeps an unparseable one as -1."""
    raw = os.environ.get(name)
    if value == -1 and raw is not None:
        return repr(raw)
    return repr(value)


@register("qassist")
def check_engine_sizes(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    values: dict[str, int] = {}
    for name in POSITIVE_INT_SETTINGS:
        value = getattr(settings, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            values[name] = value
            continue
        errors.append(
            Error(
                f"{name}={_shown(name, value)} is not a positive integer.",
                hint=f"Set {name} to a whole number above 0, or unset it for the default.",
                id="qassist.E002",
            )
        )

    def rule(left: str, right: str, holds: bool, why: str) -> None:
        if left in values and right in values and not holds:
            errors.append(
                Error(
                    f"{left}={values[left]} and {right}={values[right]}: {why}.",
                    id="qassist.E002",
                )
            )

    parallel = values.get("QASSIST_PARALLEL", 0)
    rule(
        "QASSIST_BATCH_TOKENS",
        "QASSIST_PARALLEL",
        values.get("QASSIST_BATCH_TOKENS", 0) >= parallel,
        "one engine step must fit a token for every running sequence, so "
        "QASSIST_BATCH_TOKENS must be at least QASSIST_PARALLEL",
    )
    rule(
        "QASSIST_MAX_SEQ_TOKENS",
        "QASSIST_CONTEXT_SIZE",
        values.get("QASSIST_MAX_SEQ_TOKENS", 0) <= values.get("QASSIST_CONTEXT_SIZE", 0),
        "one conversation cannot hold more tokens than the whole context, so "
        "QASSIST_MAX_SEQ_TOKENS must be at most QASSIST_CONTEXT_SIZE",
    )
    if parallel > MAX_PARALLEL:
        errors.append(
            Error(
                f"QASSIST_PARALLEL={parallel}: llama.cpp runs at most {MAX_PARALLEL} sequences.",
                id="qassist.E002",
            )
        )
    return errors + _temperature_errors() + _nice_errors()


def _nice_errors() -> list[CheckMessage]:
    name = "QASSIST_ENGINE_NICE"
    value = getattr(settings, name, 0)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NICE:
        return []
    return [
        Error(
            f"{name}={_shown(name, value)} is not a whole number from 0 to {MAX_NICE}.",
            hint="It is how much the engine lowers its CPU priority (Unix nice); 0 leaves it.",
            id="qassist.E002",
        )
    ]


def _temperature_errors() -> list[CheckMessage]:
    name = "QASSIST_DEFAULT_TEMPERATURE"
    value = getattr(settings, name, 0.0)
    if isinstance(value, int | float) and 0.0 <= value <= MAX_TEMPERATURE:  # NaN fails too
        return []
    return [
        Error(
            f"{name}={_shown(name, value)} is not a number from 0 to {MAX_TEMPERATURE:g}.",
            hint="0 is greedy decoding; 0.7 is the default.",
            id="qassist.E002",
        )
    ]


QUEUE_POLICIES = ("fair", "priority", "fcfs")
SCHEDULING_NUMBERS = ("QASSIST_QUEUE_AGING_SECONDS", "QASSIST_MAX_WAIT_SECONDS")


@register("qassist")
def check_scheduling(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []

    def number(name: str, *, positive: bool, hint: str) -> None:
        value = getattr(settings, name, None)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and (value > 0 if positive else value >= 0)
        ):
            return
        rule = "a number above 0" if positive else "a number of 0 or more"
        errors.append(
            Error(f"{name}={_shown(name, value)} is not {rule}.", hint=hint, id="qassist.E007")
        )

    policy = getattr(settings, "QASSIST_QUEUE_POLICY", "fair")
    if policy not in QUEUE_POLICIES:
        errors.append(
            Error(
                f"QASSIST_QUEUE_POLICY={policy!r} is not one of {', '.join(QUEUE_POLICIES)}.",
                hint="fair: weighted fair share between tenants (the default).",
                id="qassist.E007",
            )
        )
    values = [getattr(settings, name, None) for name in SCHEDULING_NUMBERS]
    number(
        "QASSIST_QUEUE_AGING_SECONDS",
        positive=True,
        hint="Seconds after which a waiting request goes first whatever the shares; 30 is the "
        "default.",
    )
    number(
        "QASSIST_MAX_WAIT_SECONDS",
        positive=True,
        hint="Seconds a request may wait before it is answered busy; 90 is the default.",
    )
    number(
        "QASSIST_MIN_STREAM_SPEED",
        positive=False,
        hint="Tokens/s each running stream keeps at least; 0 turns the speed floor off.",
    )
    number(
        "QASSIST_TTFT_TARGET_SECONDS",
        positive=False,
        hint="Seconds a request may wait before the speed floor yields to start it; 0 never "
        "yields (the floor holds whoever waits).",
    )
    number(
        "QASSIST_MIN_STREAM_SPEED_HARD",
        positive=False,
        hint="Tokens/s below which no stream starts even when the floor yields; 0 lets it "
        "yield up to QASSIST_PARALLEL streams.",
    )
    number(
        "QASSIST_HOST_CACHE_MB",
        positive=False,
        hint="Megabytes of host memory for idle conversations' KV; 0 turns the cache off.",
    )
    number(
        "QASSIST_HOST_CACHE_DISK_MB",
        positive=False,
        hint="Megabytes of disk for idle conversations' KV beyond memory; 0 turns it off.",
    )
    number(
        "QASSIST_PASSAGE_KV_MB",
        positive=True,
        hint="Megabytes of host memory for passages' precomputed KV (QASSIST_PASSAGE_KV).",
    )
    number(
        "QASSIST_PASSAGE_KV_DISK_MB",
        positive=False,
        hint="Megabytes of disk for passages' precomputed KV beyond memory; 0 keeps none there.",
    )
    number(
        "QASSIST_PASSAGE_KV_RECOMPUTE",
        positive=False,
        hint="Tokens at the start of each placed passage computed again; 0 for none.",
    )
    number(
        "QASSIST_PARK_IDLE_STEPS",
        positive=False,
        hint="Engine steps before an idle conversation's KV moves to host memory; 0 keeps it.",
    )
    for network in getattr(settings, "QASSIST_METRICS_NETWORKS", []):
        try:
            ipaddress.ip_network(network)
        except ValueError:
            errors.append(
                Error(
                    f"QASSIST_METRICS_NETWORKS holds {network!r}, which is not a network.",
                    hint="Comma-separated CIDR networks, e.g. 10.0.0.0/8,192.168.1.5/32.",
                    id="qassist.E007",
                )
            )
    aging, wait = values[0], values[1]
    if (
        not errors
        and isinstance(aging, int | float)
        and isinstance(wait, int | float)
        and aging >= wait
    ):
        errors.append(
            Error(
                f"QASSIST_QUEUE_AGING_SECONDS={aging:g} and QASSIST_MAX_WAIT_SECONDS={wait:g}: "
                "a request would be refused before aging could move it up, so aging must be "
                "shorter than the wait bound.",
                id="qassist.E007",
            )
        )
    if not errors:
        errors += _floor_yield_errors()
    return errors


def _floor_yield_errors() -> list[CheckMessage]:
    """The yield's settings against the floor and the wait bound (numbers checked already)."""
    floor = settings.QASSIST_MIN_STREAM_SPEED
    hard = settings.QASSIST_MIN_STREAM_SPEED_HARD
    target = settings.QASSIST_TTFT_TARGET_SECONDS
    wait = settings.QASSIST_MAX_WAIT_SECONDS
    if floor <= 0 or target <= 0:
        return []  # no floor, or one that never yields: nothing to compare
    if hard > floor:
        return [
            Error(
                f"QASSIST_MIN_STREAM_SPEED_HARD={hard:g} is above QASSIST_MIN_STREAM_SPEED="
                f"{floor:g}: the hard minimum is how far the floor may yield, so it must not be "
                "higher than the floor.",
                hint="2.5 tokens/s under a floor of 5 is the default; set "
                "QASSIST_TTFT_TARGET_SECONDS=0 for a floor that never yields.",
                id="qassist.E007",
            )
        ]
    if target >= wait:
        return [
            Error(
                f"QASSIST_TTFT_TARGET_SECONDS={target:g} and QASSIST_MAX_WAIT_SECONDS={wait:g}: "
                "a request would be refused busy before the floor yielded for it, so the target "
                "must be shorter than the wait bound.",
                id="qassist.E007",
            )
        ]
    return []


@register("qassist")
def check_engine_mode(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    mode = settings.QASSIST_ENGINE
    redis_url = settings.REDIS_URL
    if mode not in ENGINE_MODES:
        errors.append(
            Error(
                f"QASSIST_ENGINE={mode!r} is not one of {', '.join(ENGINE_MODES)}.",
                hint="auto: a separate inference worker when REDIS_URL is set, "
                "the engine inside the web process otherwise.",
                id="qassist.E003",
            )
        )
    elif mode == "redis" and not redis_url:
        errors.append(
            Error(
                "QASSIST_ENGINE=redis needs REDIS_URL: web processes reach the inference "
                "worker through Redis.",
                hint="Set REDIS_URL, or QASSIST_ENGINE=embedded to run the engine in-process.",
                id="qassist.E003",
            )
        )
    if redis_url and not _is_redis_url(redis_url):
        errors.append(
            Error(
                f"REDIS_URL={redis_url!r} is not a redis://, rediss:// or unix:// URL.",
                hint="For example redis://127.0.0.1:6379/0; unset it to run without Redis.",
                id="qassist.E003",
            )
        )
    return errors


def _is_redis_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError:
        return False
    if parts.scheme == "unix":
        return bool(parts.path)
    return parts.scheme in REDIS_SCHEMES and bool(parts.hostname)


@register("qassist")
def check_model(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    """QASSIST_MODEL, then every other model of QASSIST_MODELS (issue #36)."""
    names = list(dict.fromkeys([settings.QASSIST_MODEL, *settings.QASSIST_MODELS]))
    return [problem for name in names for problem in _check_one_model(name)]


def _check_one_model(name: str) -> list[CheckMessage]:
    setting = "QASSIST_MODEL" if name == settings.QASSIST_MODEL else "QASSIST_MODELS"
    models_dir = Path(settings.QASSIST_MODELS_DIR)
    if name in modelstore.REGISTRY:
        if modelstore.is_present(name, models_dir):
            return []
        return [
            Warning(
                f"The model {name} is not in {models_dir} yet; replies fail until it is.",
                hint=f"Run `python manage.py fetch_model {name}`.",
                id="qassist.W001",
            )
        ]
    try:
        modelstore.resolve_model_path(name, models_dir)
    except modelstore.UnknownModelError:
        return [
            Error(
                f"{setting}: {name!r} is neither a known model nor an existing .gguf file.",
                hint=f"Use one of {', '.join(modelstore.REGISTRY)}, or the path of a .gguf file.",
                id="qassist.E004",
            )
        ]
    return []


@register("qassist")
def check_cpu_budget(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    """Engines taking turns for the host's cores (issue #36, inference/budget.py)."""
    mode = str(settings.QASSIST_CPU_BUDGET).strip().lower()
    if mode in ("auto", "on", "off", "1", "0", "true", "false", "yes", "no"):
        return []
    return [
        Error(
            f"QASSIST_CPU_BUDGET={settings.QASSIST_CPU_BUDGET!r} is not auto, on or off.",
            hint="auto (the default) turns it on when more than one model is configured.",
            id="qassist.E009",
        )
    ]


@register("qassist")
def check_model_token_weights(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    """What each model's tokens count for in quotas and limits (issue #36)."""
    from tenants.services import parse_model_token_weights

    try:
        parse_model_token_weights(str(settings.QASSIST_MODEL_TOKEN_WEIGHTS))
    except ValueError as exc:
        return [
            Error(
                f"QASSIST_MODEL_TOKEN_WEIGHTS: {exc}; every model's tokens count once until "
                "it is fixed.",
                hint='For example QASSIST_MODEL_TOKEN_WEIGHTS="qwen2.5-coder-1.5b=3".',
                id="qassist.E008",
            )
        ]
    return []


@register("qassist")
def check_database_url(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    url = settings.DATABASE_URL
    try:
        config = dj_database_url.parse(url)
    except Exception as exc:  # dj_database_url raises ValueError subclasses, urllib others
        # Its first sentence says what is wrong; the rest lists every scheme it knows.
        return [_database_error(url, str(exc).split(". ")[0])]
    if not config.get("NAME"):
        return [_database_error(url, "it names no database")]
    return []


def _database_error(url: str, reason: str) -> Error:
    return Error(
        f"DATABASE_URL={_without_password(url)!r} cannot be used: {reason}",
        hint="For example postgres://USER:PASSWORD@HOST:5432/NAME; unset it for SQLite in var/.",
        id="qassist.E005",
    )


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.password:
            return url.replace(f":{parts.password}@", ":***@", 1)
    except ValueError:
        pass
    return url


@register("qassist")
def check_login_lockout(app_configs: AppConfigs = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    limit = settings.AXES_FAILURE_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        errors.append(
            Error(
                f"QASSIST_LOGIN_FAILURE_LIMIT={_shown('QASSIST_LOGIN_FAILURE_LIMIT', limit)} "
                "is not a positive integer.",
                id="qassist.E006",
            )
        )
    cooloff = settings.AXES_COOLOFF_TIME
    if cooloff is None or cooloff.total_seconds() <= 0:
        raw = os.environ.get("QASSIST_LOGIN_LOCKOUT_MINUTES", "")
        errors.append(
            Error(
                f"QASSIST_LOGIN_LOCKOUT_MINUTES={raw!r} is not a positive number of minutes.",
                id="qassist.E006",
            )
        )
    address_limit = settings.QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT
    if not isinstance(address_limit, int) or address_limit < 1:
        errors.append(
            Error(
                "QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT="
                f"{_shown('QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT', address_limit)} "
                "is not a positive integer.",
                id="qassist.E006",
            )
        )
    throttle = settings.QASSIST_LOGIN_USER_THROTTLE_SECONDS
    if not isinstance(throttle, int | float) or throttle < 0:
        errors.append(
            Error(
                "QASSIST_LOGIN_USER_THROTTLE_SECONDS="
                f"{_shown('QASSIST_LOGIN_USER_THROTTLE_SECONDS', throttle)} "
                "is not a number of seconds (0 or more).",
                id="qassist.E006",
            )
        )
    if os.environ.get("QASSIST_LOGIN_LOCKOUT_BY", "").strip():
        errors.append(
            Warning(
                "QASSIST_LOGIN_LOCKOUT_BY is no longer read: a username is locked from one "
                "address at a time, an address after QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT "
                "failures.",
                hint="Remove it from the environment (README: Configuration).",
                id="qassist.W006",
            )
        )
    return errors
