"""Endpoint configuration: the YAML `endpoints` list, and the CLI flags that build it."""

from __future__ import annotations

import pytest

from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.errors import ConfigError


def test_base_url_flags_become_endpoints_sharing_model_and_key_variable():
    cfg = CompressionConfig().with_endpoint_flags(
        ["http://a:1/v1", "http://b:2/v1"], "m", "MY_KEY", environ={})
    assert cfg.summarization_endpoints() == [EndpointConfig("http://a:1/v1", "m", "MY_KEY"),
                                             EndpointConfig("http://b:2/v1", "m", "MY_KEY")]
    assert cfg.summarization_model == "m"


def test_base_url_without_key_flag_uses_the_configured_variable_only_when_set():
    base = CompressionConfig(api_key_env="OPENROUTER_API_KEY")
    unset = base.with_endpoint_flags(["http://localhost:8000/v1"], None, None, environ={})
    assert unset.summarization_endpoints()[0].api_key_env is None
    assert unset.summarization_endpoints()[0].model == base.summarization_model
    is_set = base.with_endpoint_flags(["http://localhost:8000/v1"], None, None,
                                      environ={"OPENROUTER_API_KEY": "k"})
    assert is_set.summarization_endpoints()[0].api_key_env == "OPENROUTER_API_KEY"


def test_model_and_key_flags_override_configured_endpoints():
    cfg = CompressionConfig.from_dict({"summarization": {"endpoints": [
        {"base_url": "http://a/v1", "model": "x"},
        {"base_url": "http://b/v1", "model": "y", "api_key_env": "B"}]}})
    assert cfg.with_endpoint_flags(None, None, None) is cfg
    changed = cfg.with_endpoint_flags(None, "z", "K")
    assert [(e.model, e.api_key_env) for e in changed.summarization_endpoints()] == \
        [("z", "K"), ("z", "K")]
    single = CompressionConfig().with_endpoint_flags(None, "z", "K")
    assert single.summarization_endpoints() == [EndpointConfig(single.base_url, "z", "K")]


def test_a_null_key_variable_sends_no_key():
    cfg = CompressionConfig.from_dict({"summarization": {"api_key_env": None}})
    assert cfg.summarization_endpoints()[0].api_key_env is None


@pytest.mark.parametrize(("item", "message"), [
    ({"weight": 0}, "weight must be positive"),
    ({"max_concurrency": "8"}, "max_concurrency must be a whole number or null"),
    ({"rpm": -5}, "rpm must be positive"),
    ({"api_key_env": 3}, "api_key_env must be a string or null"),
    ({"max_concurency": 3}, "did you mean 'summarization.endpoints[0].max_concurrency'"),
])
def test_bad_endpoint_values_are_named(item, message):
    data = {"summarization": {"endpoints": [{"base_url": "http://a/v1", "model": "m", **item}]}}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        CompressionConfig.from_dict(data)
