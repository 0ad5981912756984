from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.checks import CheckMessage
from pytest_django import Settings

from qassist import checks


def ids(messages: list[CheckMessage]) -> list[str]:
    return [str(message.id) for message in messages]


# --- qassist.E001: llama-cpp-python ----------------------------------------------------------


def test_it_accepts_llama_cpp_built_without_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "llama_system_info", lambda: "CPU : AVX2 = 1 | AVX512 = 1 |")
    assert checks.check_llama_cpp() == []


def test_it_rejects_llama_cpp_built_with_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "llama_system_info", lambda: "CPU : AVX2 = 1 | AMX_INT8 = 1 |")
    messages = checks.check_llama_cpp()
    assert ids(messages) == ["qassist.E001"]
    assert "AMX" in messages[0].msg
    assert "make install" in str(messages[0].hint)


def test_it_reports_a_missing_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise ImportError("No module named 'llama_cpp'")

    monkeypatch.setattr(checks, "llama_system_info", missing)
    messages = checks.check_llama_cpp()
    assert ids(messages) == ["qassist.E001"]
    assert "llama_cpp" in messages[0].msg


def test_the_installed_llama_cpp_passes() -> None:
    assert checks.check_llama_cpp() == []


# --- qassist.E002: engine sizes --------------------------------------------------------------


def test_the_default_sizes_pass() -> None:
    assert checks.check_engine_sizes() == []


def test_it_names_a_malformed_integer_and_what_was_written(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QASSIST_PARALLEL", "sixteen")
    settings.QASSIST_PARALLEL = -1  # what env_int makes of it
    messages = checks.check_engine_sizes()
    assert ids(messages) == ["qassist.E002"]
    assert "QASSIST_PARALLEL='sixteen'" in messages[0].msg


@pytest.mark.parametrize("name", checks.POSITIVE_INT_SETTINGS)
def test_every_size_must_be_positive(settings: Settings, name: str) -> None:
    setattr(settings, name, 0)
    messages = checks.check_engine_sizes()
    assert "qassist.E002" in ids(messages)
    assert any(f"{name}=0" in message.msg for message in messages)


@pytest.mark.parametrize("value", [-1, 20])
def test_the_engine_nice_value_must_be_one_unix_accepts(settings: Settings, value: int) -> None:
    settings.QASSIST_ENGINE_NICE = value
    messages = checks.check_engine_sizes()
    assert ids(messages) == ["qassist.E002"]
    assert f"QASSIST_ENGINE_NICE={value}" in messages[0].msg


def test_a_step_must_fit_every_running_sequence(settings: Settings) -> None:
    settings.QASSIST_PARALLEL = 32
    settings.QASSIST_BATCH_TOKENS = 16
    messages = checks.check_engine_sizes()
    assert ids(messages) == ["qassist.E002"]
    assert "QASSIST_BATCH_TOKENS=16" in messages[0].msg


def test_a_conversation_must_fit_the_context(settings: Settings) -> None:
    settings.QASSIST_CONTEXT_SIZE = 2048
    settings.QASSIST_MAX_SEQ_TOKENS = 4096
    messages = checks.check_engine_sizes()
    assert ids(messages) == ["qassist.E002"]
    assert "QASSIST_MAX_SEQ_TOKENS=4096" in messages[0].msg


def test_parallel_is_capped_at_llama_cpps_limit(settings: Settings) -> None:
    settings.QASSIST_PARALLEL = 257
    settings.QASSIST_BATCH_TOKENS = 512
    assert ids(checks.check_engine_sizes()) == ["qassist.E002"]
    settings.QASSIST_PARALLEL = 256
    assert checks.check_engine_sizes() == []


@pytest.mark.parametrize("value", [-1.0, 2.5, float("nan")])
def test_the_default_temperature_must_be_between_0_and_2(settings: Settings, value: float) -> None:
    settings.QASSIST_DEFAULT_TEMPERATURE = value
    messages = checks.check_engine_sizes()
    assert ids(messages) == ["qassist.E002"]
    assert "QASSIST_DEFAULT_TEMPERATURE" in messages[0].msg


def test_it_names_a_malformed_temperature_as_written(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QASSIST_DEFAULT_TEMPERATURE", "warm")
    settings.QASSIST_DEFAULT_TEMPERATURE = -1.0  # what env_float makes of it
    assert "QASSIST_DEFAULT_TEMPERATURE='warm'" in checks.check_engine_sizes()[0].msg


def test_greedy_decoding_is_a_valid_default(settings: Settings) -> None:
    settings.QASSIST_DEFAULT_TEMPERATURE = 0.0
    assert checks.check_engine_sizes() == []


# --- qassist.E003: engine mode and Redis -----------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "redis_url"),
    [
        ("auto", ""),
        ("auto", "redis://127.0.0.1:6379/0"),
        ("embedded", ""),
        ("redis", "rediss://user:secret@cache.example.com:6380/1"),
        ("redis", "unix:///run/redis/redis.sock"),
    ],
)
def test_it_accepts_usable_engine_settings(settings: Settings, engine: str, redis_url: str) -> None:
    settings.QASSIST_ENGINE = engine
    settings.REDIS_URL = redis_url
    assert checks.check_engine_mode() == []


def test_it_rejects_an_unknown_engine_mode(settings: Settings) -> None:
    settings.QASSIST_ENGINE = "turbo"
    messages = checks.check_engine_mode()
    assert ids(messages) == ["qassist.E003"]
    assert "'turbo'" in messages[0].msg


def test_redis_mode_needs_redis_url(settings: Settings) -> None:
    settings.QASSIST_ENGINE = "redis"
    settings.REDIS_URL = ""
    messages = checks.check_engine_mode()
    assert ids(messages) == ["qassist.E003"]
    assert "REDIS_URL" in messages[0].msg


@pytest.mark.parametrize(
    "redis_url", ["http://127.0.0.1:6379", "127.0.0.1:6379", "redis://host:port/0", "redis://"]
)
def test_it_rejects_a_redis_url_that_is_not_one(settings: Settings, redis_url: str) -> None:
    settings.REDIS_URL = redis_url
    messages = checks.check_engine_mode()
    assert ids(messages) == ["qassist.E003"]
    assert redis_url in messages[0].msg


# --- qassist.W001 / E004: the model ----------------------------------------------------------


def test_a_missing_model_file_is_a_warning_naming_the_command(
    settings: Settings, tmp_path: Path
) -> None:
    settings.QASSIST_MODEL = "smollm2-135m"
    settings.QASSIST_MODELS_DIR = tmp_path
    messages = checks.check_model()
    assert ids(messages) == ["qassist.W001"]
    assert "manage.py fetch_model smollm2-135m" in str(messages[0].hint)


def test_a_gguf_path_is_accepted(settings: Settings, tmp_path: Path) -> None:
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    settings.QASSIST_MODEL = str(model)
    assert checks.check_model() == []


def test_an_unknown_model_is_an_error(settings: Settings, tmp_path: Path) -> None:
    settings.QASSIST_MODEL = "gpt-5"
    settings.QASSIST_MODELS_DIR = tmp_path
    messages = checks.check_model()
    assert ids(messages) == ["qassist.E004"]
    assert "'gpt-5'" in messages[0].msg


# --- qassist.E005: DATABASE_URL --------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////srv/qassist/db.sqlite3",
        "postgres://qassist:secret@db.internal:5432/qassist",
        "postgresql://postgres@127.0.0.1/test",
    ],
)
def test_it_accepts_a_database_url(settings: Settings, url: str) -> None:
    settings.DATABASE_URL = url
    assert checks.check_database_url() == []


@pytest.mark.parametrize(
    "url", ["", "localhost:5432/qassist", "mongodb://db/qassist", "postgres://db:99999999/x"]
)
def test_it_rejects_a_database_url_it_cannot_parse(settings: Settings, url: str) -> None:
    settings.DATABASE_URL = url
    assert ids(checks.check_database_url()) == ["qassist.E005"]


def test_a_database_url_without_a_database_name_is_rejected(settings: Settings) -> None:
    settings.DATABASE_URL = "postgres://db.internal:5432"
    messages = checks.check_database_url()
    assert ids(messages) == ["qassist.E005"]
    assert "names no database" in messages[0].msg


def test_the_database_error_hides_the_password(settings: Settings) -> None:
    settings.DATABASE_URL = "postgres://qassist:hunter2@db.internal:5432"
    messages = checks.check_database_url()
    assert "hunter2" not in messages[0].msg
    assert "***" in messages[0].msg


def test_the_checks_are_registered() -> None:
    from django.core.checks import registry

    registered = registry.registry.get_checks()
    for check in (
        checks.check_llama_cpp,
        checks.check_engine_sizes,
        checks.check_engine_mode,
        checks.check_model,
        checks.check_database_url,
        checks.check_scheduling,
    ):
        assert check in registered


def test_the_default_login_lockout_settings_pass() -> None:
    assert checks.check_login_lockout() == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AXES_FAILURE_LIMIT", 0),
        ("AXES_FAILURE_LIMIT", -1),  # what env_int keeps for an unparseable value
        ("AXES_COOLOFF_TIME", timedelta(minutes=-1)),
        ("QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT", 0),
        ("QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT", -1),
        ("QASSIST_LOGIN_USER_THROTTLE_SECONDS", -1.0),
    ],
)
def test_a_malformed_login_lockout_setting_is_named(
    settings: Settings, name: str, value: object
) -> None:
    setattr(settings, name, value)
    [error] = checks.check_login_lockout()
    assert error.id == "qassist.E006"


def test_the_retired_lockout_by_setting_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QASSIST_LOGIN_LOCKOUT_BY", "username")
    [warning] = checks.check_login_lockout()
    assert warning.id == "qassist.W006"


# --- qassist.E007: scheduling ----------------------------------------------------------------


def test_the_default_scheduling_settings_pass() -> None:
    assert checks.check_scheduling() == []


def test_an_unknown_queue_policy_is_an_error(settings: Settings) -> None:
    settings.QASSIST_QUEUE_POLICY = "lottery"
    messages = checks.check_scheduling()
    assert ids(messages) == ["qassist.E007"]
    assert "lottery" in messages[0].msg


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("QASSIST_QUEUE_AGING_SECONDS", 0),
        ("QASSIST_MAX_WAIT_SECONDS", -1.0),
        ("QASSIST_MIN_STREAM_SPEED", -1.0),
        ("QASSIST_MIN_STREAM_SPEED", float("nan")),
        ("QASSIST_TTFT_TARGET_SECONDS", -2.0),
        ("QASSIST_MIN_STREAM_SPEED_HARD", float("inf")),
        ("QASSIST_HOST_CACHE_MB", -1),
    ],
)
def test_scheduling_numbers_out_of_range_are_errors(
    settings: Settings, name: str, value: float
) -> None:
    setattr(settings, name, value)
    messages = checks.check_scheduling()
    assert ids(messages) == ["qassist.E007"]
    assert name in messages[0].msg


def test_the_speed_floor_and_the_host_cache_may_be_turned_off(settings: Settings) -> None:
    settings.QASSIST_MIN_STREAM_SPEED = 0.0
    settings.QASSIST_HOST_CACHE_MB = 0
    assert checks.check_scheduling() == []


def test_the_hard_minimum_must_not_be_above_the_floor(settings: Settings) -> None:
    settings.QASSIST_MIN_STREAM_SPEED = 3.0
    settings.QASSIST_MIN_STREAM_SPEED_HARD = 4.0
    messages = checks.check_scheduling()
    assert ids(messages) == ["qassist.E007"]
    assert "QASSIST_MIN_STREAM_SPEED_HARD=4" in messages[0].msg


def test_the_first_token_target_must_come_before_the_wait_bound(settings: Settings) -> None:
    settings.QASSIST_TTFT_TARGET_SECONDS = 90.0
    settings.QASSIST_MAX_WAIT_SECONDS = 90.0
    messages = checks.check_scheduling()
    assert ids(messages) == ["qassist.E007"]
    assert "shorter than the wait bound" in messages[0].msg


def test_a_floor_that_never_yields_or_no_floor_needs_no_hard_minimum(settings: Settings) -> None:
    settings.QASSIST_MIN_STREAM_SPEED_HARD = 9.0  # above the floor, but never used:
    settings.QASSIST_TTFT_TARGET_SECONDS = 0.0  # the floor never yields
    assert checks.check_scheduling() == []
    settings.QASSIST_TTFT_TARGET_SECONDS = 2.0
    settings.QASSIST_MIN_STREAM_SPEED = 0.0  # no floor at all
    assert checks.check_scheduling() == []


def test_aging_must_come_before_the_wait_bound(settings: Settings) -> None:
    settings.QASSIST_QUEUE_AGING_SECONDS = 120.0
    settings.QASSIST_MAX_WAIT_SECONDS = 90.0
    messages = checks.check_scheduling()
    assert ids(messages) == ["qassist.E007"]
    assert "shorter than the wait bound" in messages[0].msg


def test_a_metrics_network_that_is_not_one_is_an_error(settings: Settings) -> None:
    settings.QASSIST_METRICS_NETWORKS = ["10.0.0.0/8", "intranet"]
    messages = checks.check_scheduling()
    assert ids(messages) == ["qassist.E007"]
    assert "intranet" in messages[0].msg


def test_every_model_of_QASSIST_MODELS_is_checked(settings: Settings, tmp_path: Path) -> None:
    settings.QASSIST_MODEL = "smollm2-135m"
    settings.QASSIST_MODELS = ["qwen2.5-coder-1.5b", "gpt-5"]
    settings.QASSIST_MODELS_DIR = tmp_path

    messages = checks.check_model()

    assert ids(messages) == ["qassist.W001", "qassist.W001", "qassist.E004"]
    assert "fetch_model qwen2.5-coder-1.5b" in str(messages[1].hint)
    assert messages[2].msg.startswith("QASSIST_MODELS: 'gpt-5' is neither")
