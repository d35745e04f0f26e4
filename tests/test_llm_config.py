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


def test_a_key_variable_goes_only_to_the_urls_configured_for_it():
    env = {"OPENROUTER_API_KEY": "k", "VLLM_KEY": "v", "B_KEY": "b"}
    default = CompressionConfig()
    # The default provider's variable, set, never goes to another --base-url.
    [other] = default.with_endpoint_flags(["http://localhost:8000/v1"], None, None,
                                          environ=env).summarization_endpoints()
    assert other.api_key_env is None and other.model == default.summarization_model
    [same] = default.with_endpoint_flags(["https://openrouter.ai/api/v1/"], None, None,
                                         environ=env).summarization_endpoints()
    assert same.api_key_env == "OPENROUTER_API_KEY"
    # ...nor to a summarization.base_url of another provider left with the default name.
    moved = CompressionConfig.from_dict({"summarization": {"base_url": "https://x.example/v1"}})
    assert moved.summarization_endpoints()[0].api_key_env is None
    # A variable configured for a URL follows that URL (when it is set), and only it.
    vllm = CompressionConfig.from_dict({"summarization": {
        "base_url": "http://localhost:8000/v1", "api_key_env": "VLLM_KEY"}})
    assert vllm.summarization_endpoints()[0].api_key_env == "VLLM_KEY"
    flags = vllm.with_endpoint_flags(["http://localhost:8000/v1", "http://localhost:9/v1"],
                                     None, None, environ=env)
    assert [e.api_key_env for e in flags.summarization_endpoints()] == ["VLLM_KEY", None]
    unset = vllm.with_endpoint_flags(["http://localhost:8000/v1"], None, None, environ={})
    assert unset.summarization_endpoints()[0].api_key_env is None
    pool = CompressionConfig.from_dict({"summarization": {"endpoints": [
        {"base_url": "http://a/v1", "model": "x"},
        {"base_url": "http://b/v1", "model": "y", "api_key_env": "B_KEY"}]}})
    flags = pool.with_endpoint_flags(["http://b/v1", "http://a/v1"], "m", None, environ=env)
    assert [e.api_key_env for e in flags.summarization_endpoints()] == ["B_KEY", None]
    # --api-key-env names the key for every --base-url.
    named = default.with_endpoint_flags(["http://localhost:1/v1"], None, "VLLM_KEY",
                                        environ=env)
    assert named.summarization_endpoints()[0].api_key_env == "VLLM_KEY"


def test_stored_settings_carry_no_url_credentials():
    cfg = CompressionConfig().with_endpoint_flags(
        ["https://user:pa55word@host.example/v1?api_key=abc123&x=1"], "m", None, environ={})
    text = repr(cfg.fingerprint_dict())
    assert "pa55word" not in text and "abc123" not in text and "user:" not in text
    assert "https://host.example/v1?api_key=REDACTED&x=1" in text


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
