"""Settings for every worker role and command: `FITTEST_*` environment variables, then an
optional TOML file (`FITTEST_CONFIG`), then defaults. One model, so all processes agree."""

from __future__ import annotations

import difflib
import os
import pwd
import re
import ssl
import tomllib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


# The broker must not hand an unacknowledged message to another worker while the first may still
# run it: longer than the longest step, an attempt (max_timeout_s) or an evolution (its time limit).
VISIBILITY_MARGIN_S = 120
REDIS_SCHEMES = ("redis", "rediss", "unix")
# An evolution's hard time limit past its budget: the last candidate's three stages may run past it.
EVOLUTION_OVERRUN_S = 600


def _check_port(url: str) -> None:
    """Refuse a URL whose port is no number from 0 to 65535, as urllib reads it at first use."""
    try:
        urlsplit(url).port
    except ValueError:
        raise ValueError(f"{redact_url(url)!r} has a port that is not a number from 0 to 65535") from None


def user_ids(user: str) -> tuple[int, int]:
    """The uid and primary gid of a user named by name or uid; ValueError for one this host lacks."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        raise ValueError(f"no user {user!r} on this host") from None
    return entry.pw_uid, entry.pw_gid


COLLECTION_PREFIX = re.compile(r"^[A-Za-z0-9_.-]*$")


def check_collection_prefix(prefix: str) -> str:
    """The prefix becomes part of collection names and, in the embedded store, of directory names."""
    if not COLLECTION_PREFIX.match(prefix):
        raise ValueError(f"collection prefix {prefix!r} may use only letters, digits, '_', '.' and '-'")
    return prefix


MIN_RESCAN_S = 0.1  # the tools watch's shortest period (FITTEST_TOOLS_RESCAN_S), other than 0


class Settings(BaseSettings):
    # inf and nan refused as read; `FITTEST_X=` is no value, so a file's or the default applies
    model_config = SettingsConfigDict(env_prefix="FITTEST_", extra="ignore", allow_inf_nan=False, env_ignore_empty=True)

    # Services
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Broker, state store, and result backend unless FITTEST_RESULT_BACKEND is set")
    result_backend: str | None = Field(None, description="Celery result backend; defaults to FITTEST_REDIS_URL")
    redis_tls_ca: Path | None = Field(None, description="CA certificate(s) that sign the Redis server's certificate; used with rediss:// URLs by broker, backend and state store")
    redis_tls_cert: Path | None = Field(None, description="Client certificate for Redis mutual TLS (rediss://)")
    redis_tls_key: Path | None = Field(None, description="Private key of FITTEST_REDIS_TLS_CERT")
    qdrant_url: str | None = Field(None, description="Qdrant server URL; unset: Qdrant Edge embedded under the data directory")
    qdrant_api_key: SecretStr | None = Field(None, description="API key for the Qdrant server")
    key_prefix: str = Field("fittest:", description="Prefix of every Redis key fittest's state writes; not of Celery's queues and results: two stacks need two Redis databases (`fittest up` refuses a database whose workers serve another prefix)")
    collection_prefix: str = Field("fittest_", description="Prefix of every Qdrant collection")
    memory_retry_s: float = Field(10.0, gt=0, description="After the vector store failed to open, seconds before the next try (calls are served degraded meanwhile)")

    # Files
    data_dir: Path = Field(Path(".fittest"), description="Embedded vector store, evolved tool files, private Redis data")
    tools_dir: Path = Field(Path("examples/tools"), description="Directory of tool manifests (*.yaml), searched recursively")
    tools_rescan_s: float = Field(10.0, ge=0, description="How often the memory worker looks for manifests added, changed or removed under FITTEST_TOOLS_DIR and serves what they now say, without a restart (0: only at start; else at least 0.1)")

    # Embeddings
    embedding_model: str = Field("sentence-transformers/all-MiniLM-L6-v2", description="fastembed model name")
    embedding_model_path: Path | None = Field(None, description="Local model directory (fastembed specific_model_path); needed without internet")
    embedding_dim: int = Field(384, ge=1, description="Vector size of the embedding model (384 for all-MiniLM-L6-v2); the vector store is made for it")
    embedding_cache_size: int = Field(4096, ge=0, description="Scenario embeddings kept in the LRU cache")
    embedding_int8: bool = Field(True, description="Run the embedding model's int8 copy (matrix multiplications quantised per channel, made once into FITTEST_MODEL_CACHE_DIR): ~2x faster, vectors at cosine 0.995 to the fp32 model's; changing it moves every vector a little, so change it with a fresh vector store")
    model_cache_dir: Path = Field(Path("~/.cache/fittest"), description="Where the int8 copy of the embedding model is kept (one per model file, recipe and ONNX Runtime version; a copy no process has loaded for a week is removed)")

    # Selection
    policy: str = Field("learned", description="Selection policy: learned (ranks by what outcomes taught; explores near-ties) or seed (the design's formulas)")
    max_candidates: int = Field(8, ge=1, le=50, description="Candidates a plan keeps (at least the call's max_attempts, 5 by default)")
    min_similarity: float = Field(0.2, ge=-1, le=1, description="Semantic matches less similar than this are not candidates, nor are the tools of past successes less similar than this to the call")
    failure_similarity: float = Field(0.7, ge=-1, le=1, description="A past failure more similar than this to the scenario demotes a candidate")
    selection_cache_ttl_s: float = Field(30.0, ge=0, description="Selection cache TTL: how long rankings may reuse the vector-memory searches made for the same scenario and context; any change of quality, promotions or weights starts them afresh, so new weights apply to the next call")

    # Execution
    output_limit_bytes: int = Field(1_000_000, ge=1024, description="Largest tool output accepted")
    input_limit_bytes: int = Field(1_000_000, ge=1024, description="Largest call input accepted")
    min_timeout_s: float = Field(0.5, gt=0, description="Lower bound of a tool's adaptive timeout")
    max_timeout_s: float = Field(120.0, gt=0, description="Upper bound of a tool's adaptive timeout")
    # Bounded above: a limit past what setrlimit takes (~8.8e12 MB) failed every tool's start as its crash (review)
    tool_memory_mb: int = Field(1024, ge=64, le=1_048_576, description="Address-space limit of a tool subprocess")
    tool_cpu_s: int = Field(60, ge=1, le=86_400, description="CPU-seconds limit of a tool subprocess")
    tool_user: str | None = Field(None, description="User (name or uid) that tool subprocesses run as: executables, evolved python versions and the verification sandbox; then they cannot read the worker's environment in /proc nor write what that user cannot. Needs the workers to run as root, and this user to read the tools, the data directory's evolved versions and the Python interpreter. Unset: they run as the worker's user")
    breaker_threshold: int = Field(5, ge=1, description="Consecutive failures of a tool version that open its circuit breaker (shared by all workers)")
    breaker_cooldown_s: float = Field(60.0, gt=0, description="How long an open breaker keeps its tool version out of selection; then one probe call may try it")
    visibility_timeout_s: float | None = Field(None, gt=0, description="Seconds before the broker gives an unacknowledged call step to another worker (a crashed worker's work); default the longest step (FITTEST_MAX_TIMEOUT_S, or an evolution: FITTEST_EVOLUTION_BUDGET_S + 600) + 120; must exceed FITTEST_MAX_TIMEOUT_S")
    worker_lease_s: float = Field(60.0, ge=10, description="Seconds without a beat (each worker beats every 5 s) after which a worker counts as dead and the rescue sweep gives the messages it held back to their queues, long before the visibility timeout; a live worker cut off from Redis that long has its steps run again elsewhere")

    # Evolution
    evolution_enabled: bool = Field(True, description="Evolve a new version when every candidate fails")
    llm_url: str | None = Field(None, description="OpenAI-compatible endpoint for the code mutator (e.g. http://host:8000/v1), sent failing calls' inputs and error messages; unset: off")
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the code mutator's endpoint")
    llm_api_key: SecretStr | None = Field(None, description="Bearer key for FITTEST_LLM_URL (never printed; better set in the environment than in FITTEST_CONFIG)")
    llm_timeout_s: float = Field(60.0, gt=0, description="Time allowed for one reply of the code mutator's endpoint")
    ab_test_probability: float = Field(0.1, ge=0, le=1, description="Chance of serving a testing description variant")
    trial_share: float = Field(0.25, ge=0, le=1, description="Share of a namespace's calls served by a version on trial, evolved or given by a new manifest version (the version served before it serves the rest), of the calls a tool new to the running system matches that try it first, and of the calls of a job people judged a version's outputs wrong on that try another tool first (a second opinion)")
    trial_successes: int = Field(5, ge=1, description="Successes (K) a version needs on trial, at a success rate no worse than the version served before it, to become active; runs a tool new to the running system is tried first for")
    evolution_quality_threshold: float = Field(0.5, ge=0, le=1, description="A served version whose quality falls below this is evolved off the call path")
    evolution_cooldown_s: float = Field(600.0, ge=0, description="Quality-triggered evolution runs at most once per namespace per this many seconds")
    evolution_budget_s: float = Field(240.0, gt=0, description="Time one evolution may spend proposing and verifying candidates")
    evolution_lock_wait_s: float = Field(60.0, ge=0, description="How long a failed call waits for another evolution of its namespace before giving up")
    evolution_similar_reason: float = Field(0.85, ge=0, le=1, description="A mutation that failed for a reason this similar is not made again while that reason applies (its failing inputs still fail, until the version succeeds on them, or it failed tests, static checks, a successful input or its trial)")
    verify_static_timeout_s: float = Field(30.0, gt=0, description="Hard timeout of the static verification stage (compile and import in a subprocess)")
    verify_stage_timeout_s: float = Field(120.0, gt=0, description="Hard timeout of each verification stage that runs the candidate (test cases, replay)")
    verify_replay_successes: int = Field(5, ge=0, description="Recent successful inputs of the parent replayed against a candidate (N)")
    variant_min_trials: int = Field(10, ge=1, description="First-attempt matches a testing description variant needs before it is promoted or retired")

    # Learning
    retrain_interval_s: float = Field(300.0, gt=0, description="Beat interval of fittest.retrain_weights")
    feedback_half_life_days: float = Field(14.0, gt=0, description="Half-life of feedback weight")
    history_max_points: int = Field(100_000, ge=1_000, description="Newest records the vector store keeps of each history collection (feedback, failures, executions); the beat deletes older ones every FITTEST_RETRAIN_INTERVAL_S, a person's judgements excepted. The embedded store keeps selection's p99 within 10 ms up to ~100k")
    learner_window: int = Field(2000, ge=10, description="Most recent execution records the SPARC weights are learned from (and `fittest recommend` reads)")
    tool_classifier: bool = Field(True, description="Refit the tool classifier (which namespace served scenarios like this one) with the weights, and let the learned policy rank candidates by it (selection/classifier.py)")
    classifier_max_records: int = Field(20_000, ge=10, description="Most successful execution records one refit of the tool classifier reads, the newest (the refit's time grows with them: ~1 s for 10,000 here)")
    classifier_max_namespaces: int = Field(1_000, ge=1, description="Most namespaces one refit of the tool classifier fits (those with the most successes; the others keep their columns): its time and memory grow with successes x namespaces fitted (20,000 successes of 10,000 namespaces, all fitted: 5.9 s a pass, 30 passes a refit, 3.3 GB)")

    # Operations
    flower_user: str = Field("admin", description="Flower basic-auth user")
    flower_password: SecretStr | None = Field(None, description="Flower basic-auth password; set: Flower asks for it and `fittest up` serves it on every interface; unset: on 127.0.0.1 only")
    flower_port: int = Field(5555, ge=1, le=65535, description="Port of Flower (a Procfile role; `fittest up` checks it is free before it starts)")
    metrics_port: int = Field(9808, ge=1, le=65535, description="Port of the Prometheus endpoint `fittest metrics` (a Procfile role; `fittest up` checks it is free before it starts)")
    metrics_addr: str = Field("0.0.0.0", min_length=1, description="Address `fittest metrics` listens on: every interface by default, for a Prometheus on another host (the metrics name tools and count calls, and show no input); 127.0.0.1 keeps them on this host")
    log_json: bool = Field(True, description="Worker logs as one JSON object per line; false: Celery's text format")

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError(f"{redact_url(v)!r} is not a Redis URL: it must start with redis://, rediss:// or unix://")
        if parts.scheme != "unix" and not (db := parts.path.strip("/")).isdigit() and db:  # QA 52c: a bare int() error at first use
            raise ValueError(f"{redact_url(v)!r} names database {db!r}: a Redis database is a number (/0 is the first)")
        _check_port(v)
        return v

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        """A blank value (`FITTEST_X=`, `x = ""` in FITTEST_CONFIG, spaces) leaves a setting as an unset
        one does: its default. QA 57d L5 made it so for four optional URLs and the tool user; QA 58c
        found the rest read it as they pleased: an empty FITTEST_FLOWER_PASSWORD served Flower on
        every interface with no password, an empty path meant the current directory, an empty
        FITTEST_VISIBILITY_TIMEOUT_S was refused."""
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if not (isinstance(v, str) and not v.strip())}

    @field_validator("result_backend")
    @classmethod
    def _known_backend(cls, v: str | None) -> str | None:
        """A backend Celery has, refused as the settings are read (QA 57a L2: `foo://` and `http://`
        ended the first call in a traceback of Celery's)."""
        if v is None:
            return v
        from celery.app.backends import by_url

        _check_port(v)  # QA 57d: `redis://host:notaport` passed, and the first call raised urllib's ValueError
        try:
            by_url(v)
        except Exception as exc:  # ImproperlyConfigured, or the import of a module the scheme names
            raise ValueError(f"{redact_url(v)!r} is no result backend Celery can use: {exc}") from None
        return v

    @field_validator("qdrant_url", "llm_url")
    @classmethod
    def _http_url(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Refused as the settings are read (QA 58c L7: `notaurl` for the code mutator's endpoint was
        accepted, to fail in the first evolution's changelog)."""
        server = {"qdrant_url": "a Qdrant server's URL", "llm_url": "an OpenAI-compatible endpoint's URL"}[str(info.field_name)]
        if v is not None and (urlsplit(v).scheme not in ("http", "https") or not urlsplit(v).hostname):
            raise ValueError(f"{redact_url(v)!r} is not {server}: it must be http(s)://HOST:PORT/…")
        if v is not None:
            _check_port(v)
        return v

    @field_validator("tool_user")
    @classmethod
    def _known_user(cls, v: str | None) -> str | None:
        if v is not None:
            user_ids(v)  # a user this host has
        return v

    @field_validator("tools_rescan_s")
    @classmethod
    def _rescan_floor(cls, v: float) -> float:
        """QA 58c L1: 0.001 kept an idle memory worker at a fifth of a core, reading the directory."""
        if 0 < v < MIN_RESCAN_S:
            raise ValueError(f"{v:g} s is too often to read the tools directory: 0 (only at start) or at least {MIN_RESCAN_S:g}")
        return v

    @field_validator("collection_prefix")
    @classmethod
    def _collection_prefix(cls, v: str) -> str:
        """Refused as the settings are read, not by the memory worker's store with every call then
        served degraded (QA 57a M4)."""
        return check_collection_prefix(v)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        """Refused as the settings are read, not when the first selector is built (QA: `fittest
        settings` showed FITTEST_POLICY=foo and exited 0)."""
        from selection.policies import policy_names

        if v not in policy_names():
            raise ValueError(f"unknown selection policy {v!r} (known: {', '.join(policy_names())})")
        return v

    @field_validator("data_dir", "tools_dir", "model_cache_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(os.path.expanduser(str(v)))

    @property
    def backend_url(self) -> str:
        return self.result_backend or self.redis_url

    def __repr_args__(self) -> Any:
        """URLs in a repr (a traceback, a log line) show no password; SecretStr fields show none anyway."""
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if isinstance(value, str) and (name or "").endswith(("_url", "result_backend")) else value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        """Rules across settings; each message names them as the environment does."""
        if self.min_timeout_s > self.max_timeout_s:
            raise ValueError(f"FITTEST_MIN_TIMEOUT_S ({self.min_timeout_s:g}) exceeds FITTEST_MAX_TIMEOUT_S ({self.max_timeout_s:g})")
        if self.visibility_timeout_s is not None and self.visibility_timeout_s <= self.max_timeout_s:
            raise ValueError(
                f"FITTEST_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s:g}) must exceed FITTEST_MAX_TIMEOUT_S "
                f"({self.max_timeout_s:g}): a running attempt would be handed to a second worker"
            )
        return self

    def short_visibility(self) -> str | None:
        """What a FITTEST_VISIBILITY_TIMEOUT_S at or below an evolution's hard stop risks, or None: the
        broker may hand a running evolution's message to a second evolver (QA 57a L9: accepted
        without a word). Not refused: a stack without evolution, or whose evolutions end sooner,
        may want it shorter."""
        if self.visibility_timeout_s is None or not self.evolution_enabled or self.visibility_timeout_s > self.evolution_time_limit_s:
            return None
        return (f"FITTEST_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s:g}) is not above an evolution's hard stop "
                f"(FITTEST_EVOLUTION_BUDGET_S + {EVOLUTION_OVERRUN_S} = {self.evolution_time_limit_s:g} s): the broker may "
                "hand a running evolution to a second evolver")

    @property
    def evolution_time_limit_s(self) -> float:
        """The hard stop of one evolution task (its lock and the broker's visibility outlast it)."""
        return self.evolution_budget_s + EVOLUTION_OVERRUN_S

    @property
    def visibility_timeout(self) -> int:
        """Seconds an unacknowledged message stays with the worker that took it (see the field)."""
        longest = max(self.max_timeout_s, self.evolution_time_limit_s)
        return int(self.visibility_timeout_s or longest + VISIBILITY_MARGIN_S)

    def redis_tls(self, url: str | None = None) -> dict[str, Any]:
        """redis-py's TLS keyword arguments for a rediss:// `url` (default: FITTEST_REDIS_URL); {} for
        any other scheme. The server's certificate is always verified, against FITTEST_REDIS_TLS_CA
        or the system's CAs; the same arguments serve the broker, the result backend and the state
        store."""
        if not (url or self.redis_url).startswith("rediss://"):
            return {}
        tls: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
        for option, path in (("ssl_ca_certs", self.redis_tls_ca), ("ssl_certfile", self.redis_tls_cert),
                             ("ssl_keyfile", self.redis_tls_key)):
            if path is not None:
                tls[option] = str(path)
        return tls

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = config_file()
        if toml_path:
            if not Path(toml_path).is_file():  # the TOML source would quietly read nothing
                raise SettingsFileError(f"FITTEST_CONFIG names {Path(toml_path).resolve()}, which is not a file")
            try:
                toml = TomlConfigSettingsSource(settings_cls, toml_file=toml_path)
            except tomllib.TOMLDecodeError as exc:
                raise SettingsFileError(f"FITTEST_CONFIG {Path(toml_path).resolve()} is not valid TOML: {exc}") from exc
            _refuse_unknown_keys(toml.toml_data, Path(toml_path), settings_cls.model_fields)
            _refuse_bad_values(toml.toml_data, Path(toml_path))
            sources.append(toml)
        return tuple(sources)


class SettingsFileError(ValueError):
    """FITTEST_CONFIG names no file, one that is not TOML, a setting there is none of, or a value
    the setting refuses."""


def _refuse_unknown_keys(data: dict[str, Any], path: Path, known: Iterable[str]) -> None:
    """A key of FITTEST_CONFIG that names no setting is a typo the operator would never see (the
    environment may carry anything; the file is ours alone): name it, and what it may have meant."""
    known = list(known)
    problems = []
    for key in data:
        if key in known:
            continue
        wanted = key.lower().removeprefix("fittest_")
        if wanted in known:
            problems.append(f"{key!r} (write it as {wanted})")
        else:
            close = difflib.get_close_matches(wanted, known, n=1)
            problems.append(f"{key!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    if problems:
        raise SettingsFileError(f"FITTEST_CONFIG {path.resolve()}: no such setting: {', '.join(problems)}; "
                                "its keys are the settings' lower-case names without FITTEST_, at the top level")


class _SettingsOfTheFile(Settings):
    """The settings FITTEST_CONFIG gives, read alone: the environment's are not merged in."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def _refuse_bad_values(data: dict[str, Any], path: Path) -> None:
    """A value of FITTEST_CONFIG that the environment overrides is never validated with the merged
    settings: `retrain_interval_s = -5` passed while FITTEST_RETRAIN_INTERVAL_S was set, and broke
    the first process started without it (QA learning F6). Each value of the file is checked alone;
    rules across settings are left to the merged settings, where the environment may complete them."""
    try:
        _SettingsOfTheFile(**data)
    except ValidationError as exc:
        problems = [f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors(include_url=False, include_input=False) if e["loc"] and e["loc"][0] in data]
        if problems:
            raise SettingsFileError(f"FITTEST_CONFIG {path.resolve()}: {'; '.join(problems)}") from None


# The FITTEST_ variables read outside the settings, and by whom: neither a typo of a setting
# (`misspelled_variables`) nor in `fittest settings`, whose help lists them from here.
OTHER_VARIABLES: dict[str, str] = {
    "FITTEST_EXAMPLE_HTTP_PORT": "the example HTTP tool's port (8765, which the convert_units manifest names)",
    "FITTEST_EXAMPLE_HTTP_LOG": "set to 1, the example HTTP tool logs each request",
    "FITTEST_BROKEN_HTTP_PORT": "the broken examples' flaky server's port (8767)",
    "FITTEST_MODELS": "docker compose's folder of the embedding model",
    "FITTEST_TOOLS": "docker compose's tools folder",
    "FITTEST_TEST_REDIS_URL": "the test suite's Redis",
}


def misspelled_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each FITTEST_ variable of the environment that no setting has, but one's name
    is close to (`FITTEST_MAX_CANDIDATE`): the environment's extra variables are not refused (a
    deployment sets variables of its own), and the setting it meant stays at its default, silently,
    where the same typo in FITTEST_CONFIG is refused (QA ops)."""
    known = [f"FITTEST_{name.upper()}" for name in Settings.model_fields] + ["FITTEST_CONFIG"]
    said = []
    for name in sorted(environ if environ is not None else os.environ):
        if name.startswith("FITTEST_") and name not in known and name not in OTHER_VARIABLES:
            if close := difflib.get_close_matches(name, known, n=1, cutoff=0.85):
                said.append(f"{name} is not a setting, and is ignored: did you mean {close[0]}?")
    return said


def config_file() -> str:
    """FITTEST_CONFIG's path; "" when it is unset or blank (QA 58d L1: spaces were a file's name)."""
    return os.environ.get("FITTEST_CONFIG", "").strip()


def settings_problem(exc: BaseException) -> str | None:
    """One line naming each setting that is wrong and why, when `exc` is the settings refusing
    their values (or their file); None for any other error."""
    if isinstance(exc, SettingsFileError):
        return str(exc)
    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        # A rule across settings names them by their variables; with a file, either may come from it
        # (QA recheck F4: a file's max_timeout_s below the default minimum was told as the variables').
        config = config_file()
        across = f" (as the environment, FITTEST_CONFIG {Path(config).resolve()} and the defaults give them)" if config else ""
        return "; ".join(f"{_setting_name(e['loc'])}{e['msg'].removeprefix('Value error, ')}{'' if e['loc'] else across}"
                         for e in exc.errors(include_url=False, include_input=False))
    return None


def _setting_name(loc: tuple[int | str, ...]) -> str:
    """A refused field as the environment and FITTEST_CONFIG name it, before its message (nothing
    for a rule across settings, whose message names them)."""
    if not loc:
        return ""
    field = str(loc[0])
    return (f"FITTEST_{field.upper()} ({field} in FITTEST_CONFIG): " if config_file()
            else f"FITTEST_{field.upper()}: ")


def redact_url(url: str) -> str:
    """`url` with its password (if any) shown as `**`: for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:" if parts.username else ":"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}**@{host}"))


def shown_value(value: Any) -> str:
    """A setting's value as `fittest settings` and a bench's JSON show it: a secret hidden, a URL's
    password masked, a flag as the environment spells it; "" when unset."""
    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return "***"
    return str(value).lower() if isinstance(value, bool) else redact_url(str(value))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
