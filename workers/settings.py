"""Settings for every worker role and command: `FITTEST_*` environment variables, then an
optional TOML file (`FITTEST_CONFIG`), then defaults. One model, so all processes agree."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FITTEST_", extra="ignore")

    # Services
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Broker, state store, and result backend unless FITTEST_RESULT_BACKEND is set")
    result_backend: str | None = Field(None, description="Celery result backend; defaults to FITTEST_REDIS_URL")
    qdrant_url: str | None = Field(None, description="Qdrant server URL; unset: Qdrant Edge embedded under the data directory")
    qdrant_api_key: SecretStr | None = Field(None, description="API key for the Qdrant server")
    key_prefix: str = Field("fittest:", description="Prefix of every Redis key fittest writes")
    collection_prefix: str = Field("fittest_", description="Prefix of every Qdrant collection")

    # Files
    data_dir: Path = Field(Path(".fittest"), description="Embedded vector store, evolved tool files, private Redis data")
    tools_dir: Path = Field(Path("examples/tools"), description="Directory of tool manifests (*.yaml), searched recursively")

    # Embeddings
    embedding_model: str = Field("sentence-transformers/all-MiniLM-L6-v2", description="fastembed model name")
    embedding_model_path: Path | None = Field(None, description="Local model directory (fastembed specific_model_path); needed without internet")
    embedding_cache_size: int = Field(4096, ge=0, description="Scenario embeddings kept in the LRU cache")

    # Selection
    policy: str = Field("seed", description="Selection policy (seed until the learning policy lands)")
    max_candidates: int = Field(8, ge=1, le=50, description="Candidates a plan keeps")
    min_similarity: float = Field(0.2, ge=-1, le=1, description="Semantic matches less similar than this are not candidates")
    failure_similarity: float = Field(0.7, description="A past failure this similar to the scenario demotes a candidate")
    selection_cache_ttl_s: float = Field(30.0, ge=0, description="Selection cache TTL; also how soon new weights are used")

    # Execution
    output_limit_bytes: int = Field(1_000_000, ge=1024, description="Largest tool output accepted")
    input_limit_bytes: int = Field(1_000_000, ge=1024, description="Largest call input accepted")
    min_timeout_s: float = Field(0.5, gt=0, description="Lower bound of a tool's adaptive timeout")
    max_timeout_s: float = Field(120.0, gt=0, description="Upper bound of a tool's adaptive timeout")
    tool_memory_mb: int = Field(1024, ge=64, description="Address-space limit of a tool subprocess")
    tool_cpu_s: int = Field(60, ge=1, description="CPU-seconds limit of a tool subprocess")

    # Evolution
    evolution_enabled: bool = Field(True, description="Evolve a new version when every candidate fails")
    llm_url: str | None = Field(None, description="OpenAI-compatible endpoint for the code mutator; unset: off")
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the code mutator's endpoint")
    ab_test_probability: float = Field(0.1, ge=0, le=1, description="Chance of serving a testing description variant")

    # Learning
    retrain_interval_s: float = Field(300.0, gt=0, description="Beat interval of fittest.retrain_weights")
    feedback_half_life_days: float = Field(14.0, gt=0, description="Half-life of feedback weight")

    # Operations
    flower_user: str = Field("admin", description="Flower basic-auth user")
    flower_password: SecretStr | None = Field(None, description="Flower basic-auth password; set: Flower asks for it")
    metrics_port: int = Field(9808, description="Prometheus metrics port of `fittest up`")
    log_json: bool = Field(True, description="Structured JSON logs")

    @field_validator("data_dir", "tools_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(os.path.expanduser(str(v)))

    @property
    def backend_url(self) -> str:
        return self.result_backend or self.redis_url

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
        toml_path = os.environ.get("FITTEST_CONFIG")
        if toml_path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
