"""Pure pieces of the reliability work: degraded matching, what counts as a store failure, the
settings that keep secrets out of sight and TLS and timeouts consistent."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError

from selection.manifest import split_key
from selection.models import CallRequest
from selection.registry import ToolRegistry
from tests.conftest import EXAMPLE_TOOLS
from selection.lexical import LexicalIndex, version_text, words
from workers.degraded import registry_similarities
from workers.memory import VectorMemoryUnavailable
from workers.procfile import flower_env
from workers.settings import Settings, redact_url
from workers.store_failures import is_store_failure


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    return ToolRegistry.load([EXAMPLE_TOOLS])


@pytest.fixture(scope="module")
def index(registry: ToolRegistry) -> LexicalIndex:
    return LexicalIndex({m.key: version_text(m) for m in registry.all()})


def test_words_are_stemmed_content_words() -> None:
    assert words("Parsing the CSV files, and sorting numbers!") == ["pars", "csv", "fil", "sort", "numb"]
    assert set(words("parse a number of sorted file")) == set(words("parsing numbers of sorting files"))


def test_registry_matching_ranks_the_tool_whose_words_match(registry: ToolRegistry, index: LexicalIndex) -> None:
    sims = registry_similarities(CallRequest(scenario="sort a list of numbers quickly"), registry, index)
    assert sims and split_key(max(sims, key=sims.__getitem__))[0] in {"fast_sort", "sort_numbers"}
    assert all(0 < s <= 1 for s in sims.values())


def test_registry_matching_honours_tags_exclusions_and_versions(registry: ToolRegistry, index: LexicalIndex) -> None:
    everything = registry_similarities(CallRequest(scenario="sort numbers"), registry, index)
    key = max(everything, key=everything.__getitem__)
    assert key not in registry_similarities(CallRequest(scenario="sort numbers", exclude=[key]), registry, index)
    assert registry_similarities(CallRequest(scenario="sort numbers", tags=["no-such-tag"]), registry, index) == {}
    name, version = split_key(key)
    pinned = registry_similarities(CallRequest(scenario="sort numbers", namespace=name, version=version), registry, index)
    assert list(pinned) == [key]
    assert registry_similarities(CallRequest(scenario="the a of"), registry, index) == {}


@pytest.mark.parametrize(
    ("exc", "store_failure"),
    [
        (VectorMemoryUnavailable("locked"), True),
        (RuntimeError("engine"), True),
        (OSError("disk"), True),
        (TimeoutError(), True),
        (RedisConnectionError("redis down"), False),  # Redis is the fallback, not the store
        (ValueError("bad vector"), False),  # a bug is never hidden by degrading
        (KeyError("tool"), False),
        (KeyboardInterrupt(), False),
    ],
)
def test_what_counts_as_a_store_failure(exc: BaseException, store_failure: bool) -> None:
    assert is_store_failure(exc) is store_failure


def test_urls_and_secrets_are_hidden_in_the_settings_repr() -> None:
    s = Settings(redis_url="rediss://:pw-1@h:6380/0", result_backend="redis://user:pw-2@h/1", llm_url="http://k:pw-3@llm/v1",
                 llm_api_key="pw-4", qdrant_api_key="pw-5", flower_password="pw-6")
    text = repr(s) + str(s)
    assert not [f"pw-{i}" for i in range(1, 7) if f"pw-{i}" in text]
    assert "rediss://:**@h:6380/0" in text and "redis://user:**@h/1" in text
    assert s.redis_url == "rediss://:pw-1@h:6380/0"  # the value itself is intact
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_redis_tls_arguments_only_for_rediss_urls(tmp_path) -> None:
    plain = Settings(redis_url="redis://h/0", redis_tls_ca=tmp_path / "ca.pem")
    assert plain.redis_tls() == {}
    tls = Settings(redis_url="rediss://h/0", redis_tls_ca=tmp_path / "ca.pem", redis_tls_cert=tmp_path / "c.pem",
                   redis_tls_key=tmp_path / "k.pem")
    assert tls.redis_tls() == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": str(tmp_path / "ca.pem"),
                               "ssl_certfile": str(tmp_path / "c.pem"), "ssl_keyfile": str(tmp_path / "k.pem")}
    assert Settings(redis_url="rediss://h/0").redis_tls() == {"ssl_cert_reqs": ssl.CERT_REQUIRED}  # system CAs
    assert tls.redis_tls("redis://other/1") == {}  # e.g. a plain result backend beside a TLS broker


def test_celery_app_uses_tls_and_a_visibility_timeout_longer_than_any_attempt(tmp_path) -> None:
    from workers.app import make_app

    s = Settings(redis_url="rediss://h/0", redis_tls_ca=tmp_path / "ca.pem", max_timeout_s=30)
    conf = make_app(s).conf
    assert conf.broker_use_ssl["ssl_ca_certs"] == str(tmp_path / "ca.pem")
    assert conf.redis_backend_use_ssl["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    # The longest step is an evolution (budget 240 s + 600 s past it), not an attempt (30 s).
    assert conf.broker_transport_options["visibility_timeout"] == 240 + 600 + 120
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert not conf.worker_cancel_long_running_tasks_on_connection_loss
    assert make_app(Settings()).conf.broker_use_ssl is None


def test_visibility_timeout_must_exceed_the_longest_attempt() -> None:
    with pytest.raises(ValidationError, match="must exceed FITTEST_MAX_TIMEOUT_S"):
        Settings(max_timeout_s=60, visibility_timeout_s=60)
    assert Settings(max_timeout_s=60, visibility_timeout_s=61).visibility_timeout == 61


def test_flower_password_goes_to_its_environment_only() -> None:
    assert "FLOWER_BASIC_AUTH" not in flower_env(Settings())  # and Flower stays on 127.0.0.1 (tests/integration/test_access.py)
    assert flower_env(Settings(flower_user="ops", flower_password="s3cret")) == {"FLOWER_BASIC_AUTH": "ops:s3cret",
                                                                                 "FLOWER_ADDRESS": "0.0.0.0"}


def test_a_redis_url_without_a_redis_scheme_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="'localhost:6379' is not a Redis URL"):
        Settings(redis_url="localhost:6379")
    with pytest.raises(ValidationError, match="names database 'abc': a Redis database is a number"):  # QA 52c
        Settings(redis_url="redis://127.0.0.1:6379/abc")
    assert Settings(redis_url="redis://127.0.0.1:6379").redis_url == "redis://127.0.0.1:6379"
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url="http://:s3cret@h:1/0")
    (error,) = refused.value.errors(include_input=False)
    assert "'http://:**@h:1/0' is not a Redis URL" in error["msg"]  # the password stays out of the message
    assert Settings(redis_url="unix:///run/redis.sock").redis_url == "unix:///run/redis.sock"


def test_a_config_file_that_is_not_there_is_an_error_not_the_defaults(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FITTEST_CONFIG", str(tmp_path / "fittest.toml"))
    with pytest.raises(ValueError, match=f"FITTEST_CONFIG names {tmp_path / 'fittest.toml'}, which is not a file"):
        Settings()
    (tmp_path / "fittest.toml").write_text("max_candidates = 7\n")
    assert Settings().max_candidates == 7


def test_a_bad_value_of_the_config_file_is_refused_though_the_environment_overrides_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA learning F6: `retrain_interval_s = -5` in the file passed while FITTEST_RETRAIN_INTERVAL_S
    was set, and broke the first process started without that variable."""
    (tmp_path / "fittest.toml").write_text('retrain_interval_s = -5\npolicy = "foo"\n')
    monkeypatch.setenv("FITTEST_CONFIG", str(tmp_path / "fittest.toml"))
    monkeypatch.setenv("FITTEST_RETRAIN_INTERVAL_S", "60")
    monkeypatch.setenv("FITTEST_POLICY", "seed")
    with pytest.raises(ValueError) as refused:
        Settings()
    assert str(refused.value) == (f"FITTEST_CONFIG {tmp_path / 'fittest.toml'}: policy: unknown selection policy 'foo' "
                                  "(known: learned, seed); retrain_interval_s: Input should be greater than 0")
    # A rule across settings is the merged settings': the environment may complete the file.
    (tmp_path / "fittest.toml").write_text("max_timeout_s = 0.3\n")  # below the default minimum, 0.5
    monkeypatch.setenv("FITTEST_MIN_TIMEOUT_S", "0.1")
    assert Settings().max_timeout_s == 0.3


@pytest.mark.parametrize("name", ["max_timeout_s", "visibility_timeout_s", "retrain_interval_s", "failure_similarity"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_settings_refuse_numbers_that_are_not_finite(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    # QA: FITTEST_MAX_TIMEOUT_S=inf was taken, and `fittest call` then ended in an OverflowError traceback
    # (int(inf) for the visibility timeout); the workers' settings read it the same way.
    monkeypatch.setenv(f"FITTEST_{name.upper()}", value)
    with pytest.raises(ValidationError, match="finite number"):
        Settings()


@pytest.mark.parametrize("name", ["tool_memory_mb", "tool_cpu_s"])
def test_a_tool_limit_past_what_the_system_takes_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # Review: FITTEST_TOOL_MEMORY_MB=9000000000000 was taken, and every executable tool's start then
    # failed in setrlimit, recorded as the tool's crash.
    monkeypatch.setenv(f"FITTEST_{name.upper()}", "9000000000000")
    with pytest.raises(ValidationError, match=f"{name}\n  Input should be less than or equal to"):
        Settings()


def test_health_fails_the_store_when_its_disk_is_nearly_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA Q: a full data directory killed the memory worker with SIGBUS, and nothing had warned."""
    import shutil

    from workers.health import disk_room

    status, detail = disk_room(tmp_path, floor_mb=0)
    assert status == "ok" and detail.endswith("MB free in FITTEST_DATA_DIR")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=100 * 2**20))
    status, detail = disk_room(tmp_path)
    assert status == "fail" and detail.startswith(f"only 100 MB free in FITTEST_DATA_DIR ({tmp_path})") and "SIGBUS" in detail


def test_the_model_files_are_checked_without_loading_the_model(tmp_path: Path, model_path: Path) -> None:
    """QA 57a M3: `fittest up` started with a model directory that was not there, or one making vectors
    of another size than FITTEST_EMBEDDING_DIM, without a word; every call was then served degraded."""
    import shutil

    from workers.health import check_model_files, model_files_problem

    assert model_files_problem(Settings(embedding_model_path=model_path)) is None
    assert model_files_problem(Settings(embedding_model_path=None)) is None  # fastembed's own download: its loading tells
    assert model_files_problem(Settings(embedding_model_path=tmp_path / "none")) == \
        f"{tmp_path / 'none'} lacks model.onnx, tokenizer.json, config.json (FITTEST_EMBEDDING_MODEL_PATH)"
    assert model_files_problem(Settings(embedding_model_path=model_path, embedding_dim=100)) == \
        f"the model in {model_path} makes 384-dimensional vectors but FITTEST_EMBEDDING_DIM is 100"
    copy = tmp_path / "model"
    shutil.copytree(model_path, copy, ignore=shutil.ignore_patterns("model.onnx"))
    (copy / "model.onnx").touch()
    (copy / "config.json").write_text("not json")  # what only loading it can tell
    assert model_files_problem(Settings(embedding_model_path=copy)) is None
    check = check_model_files(Settings(embedding_model_path=model_path, embedding_dim=100))
    assert check.status == "fail" and "FITTEST_EMBEDDING_DIM is 100" in check.detail


def test_a_blank_setting_is_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """QA 57d L5: `FITTEST_RESULT_BACKEND=` was taken as unset, `FITTEST_QDRANT_URL=` and
    `FITTEST_TOOL_USER=` refused. QA 58c: an empty FITTEST_FLOWER_PASSWORD served Flower on every
    interface with an empty password, an empty path was the current directory, an empty
    FITTEST_VISIBILITY_TIMEOUT_S was refused."""
    from workers.procfile import flower_env

    blank = {"RESULT_BACKEND": " ", "QDRANT_URL": " ", "TOOL_USER": " ", "LLM_URL": "", "FLOWER_PASSWORD": "",
             "DATA_DIR": "", "EMBEDDING_MODEL_PATH": "", "VISIBILITY_TIMEOUT_S": "", "KEY_PREFIX": "",
             "QDRANT_API_KEY": "", "FLOWER_USER": "  ", "METRICS_ADDR": ""}
    for name, value in blank.items():
        monkeypatch.setenv(f"FITTEST_{name}", value)
    settings = Settings()
    for name in blank:
        field = name.lower()
        assert getattr(settings, field) == Settings.model_fields[field].default, name
    assert flower_env(settings)["FLOWER_ADDRESS"] == "127.0.0.1" and "FLOWER_BASIC_AUTH" not in flower_env(settings)
    # In FITTEST_CONFIG too; and a blank variable leaves the file's value, as an unset one does
    config = tmp_path / "fittest.toml"
    config.write_text('flower_password = ""\ndata_dir = "from-the-file"\n')
    monkeypatch.setenv("FITTEST_CONFIG", str(config))
    settings = Settings()
    assert settings.flower_password is None and settings.data_dir == Path("from-the-file")


def test_a_visibility_timeout_an_evolution_outlasts_is_said_to_risk_a_second_evolver() -> None:
    """QA 57a L9: FITTEST_VISIBILITY_TIMEOUT_S=121 was accepted without a word, where an evolution
    may run FITTEST_EVOLUTION_BUDGET_S + 600 s."""
    risk = Settings(visibility_timeout_s=121).short_visibility()
    assert risk is not None and "FITTEST_VISIBILITY_TIMEOUT_S (121) is not above an evolution's hard stop" in risk
    assert Settings(visibility_timeout_s=121, evolution_enabled=False).short_visibility() is None
    assert Settings().short_visibility() is None  # the default covers the longest step
    assert Settings(visibility_timeout_s=Settings().evolution_time_limit_s + 1).short_visibility() is None


@pytest.mark.parametrize(("value", "refused"), [("0.001", True), ("0.09", True), ("0", False), ("0.1", False), ("10", False)])
def test_a_tools_rescan_more_often_than_a_tenth_of_a_second_is_refused(monkeypatch: pytest.MonkeyPatch, value: str,
                                                                       refused: bool) -> None:
    """QA 58c L1: FITTEST_TOOLS_RESCAN_S=0.001 kept an idle memory worker at a fifth of a core."""
    from pydantic import ValidationError

    monkeypatch.setenv("FITTEST_TOOLS_RESCAN_S", value)
    if not refused:
        assert Settings().tools_rescan_s == float(value)
        return
    with pytest.raises(ValidationError, match="too often to read the tools directory: 0 \\(only at start\\) or at least 0.1"):
        Settings()
