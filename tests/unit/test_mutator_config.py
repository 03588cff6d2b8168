"""MutatorConfig is the settings' view for mutators: evolution/ cannot import the settings, so its
defaults repeat them, and this checks that they agree and that the worker copies every field."""

from __future__ import annotations

from pydantic import SecretStr

from evolution.mutation import MutatorConfig
from workers.evolver import mutator_config
from workers.settings import Settings


def test_every_field_is_a_setting_with_the_same_default() -> None:
    settings = Settings.model_fields
    assert set(MutatorConfig.model_fields) <= set(settings), set(MutatorConfig.model_fields) - set(settings)
    differ = {name: (field.default, settings[name].default) for name, field in MutatorConfig.model_fields.items()
              if field.default != settings[name].default}
    assert not differ, f"MutatorConfig default != Settings default: {differ}"


def test_the_worker_copies_every_field_from_the_settings() -> None:
    settings = Settings(max_timeout_s=33.0, llm_url="http://llm.internal/v1", llm_model="m", llm_api_key=SecretStr("k"),
                        llm_timeout_s=7.0)
    config = mutator_config(settings)
    for name in MutatorConfig.model_fields:
        assert getattr(config, name) == getattr(settings, name), name
