"""`CompressionConfig`: the reference's YAML schema, this project's extensions, validation."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import ConfigError
from .local_models import DEFAULT_LOCAL_MODEL, LOCAL_MODELS, local_model_named
from .quote import quoted
from .redact import looks_like_key, masked, strip_url_credentials

BUNDLED_TOKENIZER = "deepseek-v4"
DEFAULT_SUMMARY_NOTICE = (
    "\n\nSome of your previous tool responses may be summarized to preserve context."
)
LOW_FIDELITY_POLICIES = ("keep", "extractive", "uncompressed")
SUMMARY_REFERENCES = ("off", "tail", "all")
SUMMARIZER_BACKENDS = ("openai", "extractive", "local", "batch", "auto")
# The reference's provider and its key variable: that variable's key is sent to that
# provider only (§12: a key goes only to the endpoints configured for it).
DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_KEY_ENV = "OPENROUTER_API_KEY"
# The model the `local` backend serves unless summarization.local_model names another
# (core.local_models; summarizers.local finds the file).
BUNDLED_LOCAL_MODEL = LOCAL_MODELS[DEFAULT_LOCAL_MODEL].title
# The input bound for an LLM (room for a 32k-token model). The `local` backend has its own
# (summarizers.local) unless summarization.max_input_tokens is set to another value.
DEFAULT_MAX_INPUT_TOKENS = 24000
OUTPUT_FORMATS = ("same", "jsonl", "json", "parquet")
DATASET_FORMATS = ("auto", "sharegpt", "sharegpt-variant", "openai")
TOKEN_COUNTING = ("turns", "chat_template")
ENGINES = ("local", "ray")
# What happens to a row still over the target after its summary (§16): `keep` it as it is
# (the reference), or `elide_tool_outputs` outside the protected turns (`core.elide`).
OVER_LIMIT_STRATEGIES = ("keep", "elide_tool_outputs")
# Distill tool outputs before planning (§18, `core.distill`): off, the safe rules, or all.
DISTILL_LEVELS = ("off", "safe", "all")
# One output row per input row, or a row over the target as windows that each fit (§20,
# `core.windows`).
OUTPUT_MODES = ("rows", "windows")
# How a row over the target is brought under it (§19): summarize a run of middle turns
# (the reference), mask old tool outputs (`core.mask`), or mask first and summarize what
# still does not fit.
STRATEGIES = ("summarize", "mask", "hybrid")


@dataclass
class EndpointConfig:
    """One OpenAI-compatible endpoint of the summarization pool."""

    base_url: str
    model: str
    api_key_env: str | None = None
    weight: float = 1.0
    max_concurrency: int | None = None
    rpm: int | None = None
    tpm: int | None = None


@dataclass
class CompressionConfig:
    """Everything a compression run needs to know; field names follow the reference."""

    # tokenizer
    tokenizer_name: str = BUNDLED_TOKENIZER
    trust_remote_code: bool = False
    # compression
    target_max_tokens: int = 15250
    summary_target_tokens: int = 750
    over_limit_strategy: str = "keep"
    distill: str = "off"
    # Read every distilled row back (`core.distill_row.verify_turns`): one that does not
    # read back as the terminal showed its outputs is written undistilled, the failure
    # recorded in its metrics (§18).
    verify_distill: bool = False
    strategy: str = "summarize"
    mask_keep_last: int = 3
    mask_exclude_tools: list[str] = field(default_factory=list)
    # protected_turns
    protect_first_system: bool = True
    protect_first_human: bool = True
    protect_first_gpt: bool = True
    protect_first_tool: bool = True
    protect_last_n_turns: int = 4
    # summarization (reference keys)
    summarization_model: str = "google/gemini-3-flash-preview"
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str | None = DEFAULT_KEY_ENV  # None or "": send no key
    temperature: float | None = 0.3  # None: send none (Kimi models never get one)
    max_retries: int = 3
    retry_delay: float = 2.0
    # summarization (extensions)
    summarizer: str = "openai"
    endpoints: list[EndpointConfig] = field(default_factory=list)
    request_timeout: float = 120.0
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS
    cache_enabled: bool = True
    cache_path: str | None = None
    local_model: str | None = None
    # a summary over target x tolerance tokens is cut at a sentence end, or refused
    summary_tolerance: float = 2.0
    allow_fallback: bool = False  # an endpoint that fails every early request: fall back
    allow_insecure_http: bool = False  # send a key over plain http to a non-loopback host
    breaker_failures: int = 5  # consecutive failures that take an endpoint out of rotation
    breaker_cooldown: float = 5.0  # seconds before it is probed again (doubling, up to 60)
    # summary fidelity (§15): a summary keeping under min_fidelity of its region's facts
    # gets one repair request, then on_low_fidelity decides; summary_references appends
    # the tail-referenced identifiers a summary lacks
    min_fidelity: float | None = None
    on_low_fidelity: str = "keep"
    # issue 23: a summary stating more than max_invented facts its row does not gets the
    # same repair request, then on_low_fidelity (None: no cap)
    max_invented: int | None = None
    summary_references: str = "tail"
    # issue 36: a CI gate (exit 3) on the summaries that are fallbacks, N or "P%" (None:
    # none); `app.gates`
    max_fallback_share: int | str | None = None
    # output
    add_summary_notice: bool = True
    summary_notice_text: str = DEFAULT_SUMMARY_NOTICE
    output_suffix: str = "_compressed"
    output_format: str = "same"
    output_mode: str = "rows"
    # processing
    num_workers: int = 4
    max_concurrent_requests: int = 50
    skip_under_target: bool = True
    save_over_limit: bool = True
    per_trajectory_timeout: float = 300.0
    batch_rows: int = 256
    window_rows: int = 1024
    window_mb: float = 8.0
    checkpoint_rows: int = 20000
    checkpoint_seconds: float = 30.0
    engine: str = "local"  # local (one process) or ray (§13)
    ray_actors: int | None = None  # None: one per CPU of the Ray cluster
    # metrics
    metrics_enabled: bool = True
    metrics_per_trajectory: bool = True
    metrics_output_file: str = "compression_metrics.json"
    # dataset (extension, §14): how rows spell conversations; LLaMA-Factory's names
    dataset_format: str = "auto"
    dataset_messages: str | None = None  # the conversation column; None: the dialect's
    dataset_role_tag: str | None = None
    dataset_content_tag: str | None = None
    dataset_user_tag: str | None = None
    dataset_assistant_tag: str | None = None
    dataset_observation_tag: str | None = None
    dataset_function_tag: str | None = None
    dataset_system_tag: str | None = None
    dataset_system: str | None = None
    dataset_tools: str | None = None
    summary_role: str | None = None  # None: the dialect's user role
    # token counting (extension, §14)
    token_counting: str = "turns"
    chat_template: str | None = None  # a .jinja file; None: the tokenizer's own template

    @classmethod
    def from_yaml(cls, path: str | Path) -> CompressionConfig:
        """Load a YAML file in the reference's shape; missing keys keep their defaults
        (a key given twice in one section is an error naming both lines)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path} is not a YAML text file (byte "
                              f"0x{exc.object[exc.start]:02x} at offset {exc.start} is not "
                              "UTF-8)") from None
        from .yaml_strict import load_config_yaml

        data = load_config_yaml(text, str(path)) or {}
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> CompressionConfig:
        """Build a config from nested sections, rejecting unknown keys with a suggestion."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the top level must be a mapping of sections")
        config = cls()
        if not _names_endpoint(data.get("summarization")):
            # Hermes configs name a model and base URL and mean `openai` (the dataclass
            # default); one that names no endpoint (only a target, say) leaves the choice to
            # `auto`, as no config at all does: no key is wanted for a run it cannot make.
            config.summarizer = "auto"
        for section, values in data.items():
            if section not in SECTIONS:
                raise ConfigError(_unknown(source, str(section), list(SECTIONS), "section"))
            if values is None:
                continue
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: section '{section}' must be a mapping")
            keys = SECTIONS[section]
            for key, value in values.items():
                if key not in keys:
                    raise ConfigError(_unknown(source, f"{section}.{key}", list(keys), "key",
                                               prefix=f"{section}."))
                attr = keys[key]
                if attr == "endpoints":
                    value = _endpoints(value, source)
                elif attr == "base_url" and value is None:
                    continue  # the reference treats `base_url: null` as "keep the default"
                elif attr == "distill" and value is False:
                    value = "off"  # YAML 1.1 reads a bare `off` as false
                setattr(config, attr, value)
        config.validate(source)
        return config

    def replace(self, **overrides: Any) -> CompressionConfig:
        """A copy with the given (non-None) overrides applied and validated."""
        changed = dataclasses.replace(
            self, **{k: v for k, v in overrides.items() if v is not None}
        )
        changed.validate("command line")
        return changed

    def validate(self, source: str = "config") -> None:
        """Raise `ConfigError` naming the first invalid value."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            expected = _FIELD_TYPES[f.name]
            if not _type_ok(value, expected):
                shown = masked(value) if f.name == "api_key_env" else quoted(value)
                raise ConfigError(
                    f"{source}: {_key_of(f.name)} must be {_type_name(expected)}, got {shown}"
                )
        self._check_key_names(source)
        checks: list[tuple[bool, str]] = [
            (self.target_max_tokens > 0, "compression.target_max_tokens must be positive"),
            (self.summary_target_tokens > 0, "compression.summary_target_tokens must be positive"),
            (
                self.over_limit_strategy in OVER_LIMIT_STRATEGIES,
                "compression.over_limit_strategy must be one of "
                f"{', '.join(OVER_LIMIT_STRATEGIES)}, got {quoted(self.over_limit_strategy)}",
            ),
            (
                self.distill in DISTILL_LEVELS,
                f"compression.distill must be one of {', '.join(DISTILL_LEVELS)}, "
                f"got {self.distill!r}",
            ),
            (
                self.strategy in STRATEGIES,
                f"compression.strategy must be one of {', '.join(STRATEGIES)}, "
                f"got {quoted(self.strategy)}",
            ),
            (self.mask_keep_last >= 0, "compression.mask_keep_last must be >= 0"),
            (
                all(isinstance(n, str) and n.strip() for n in self.mask_exclude_tools),
                "compression.mask_exclude_tools must be a list of tool names (non-empty "
                f"strings), got {quoted(self.mask_exclude_tools)}",
            ),
            (
                self.summary_target_tokens < self.target_max_tokens,
                "compression.summary_target_tokens must be smaller than "
                f"compression.target_max_tokens ({self.summary_target_tokens} >= "
                f"{self.target_max_tokens})",
            ),
            (self.protect_last_n_turns >= 0, "protected_turns.last_n_turns must be >= 0"),
            (self.max_retries >= 1, "summarization.max_retries must be at least 1"),
            (self.retry_delay >= 0, "summarization.retry_delay must be >= 0"),
            (self.temperature is None or 0 <= self.temperature <= 2,
             "summarization.temperature must be between 0 and 2 (or null: send none)"),
            (self.breaker_failures >= 1, "summarization.breaker_failures must be >= 1"),
            (self.breaker_cooldown > 0, "summarization.breaker_cooldown must be positive"),
            (self.min_fidelity is None or 0 <= self.min_fidelity <= 1,
             "summarization.min_fidelity must be between 0 and 1 (or null: no bar)"),
            (self.max_invented is None or self.max_invented >= 0,
             "summarization.max_invented must be a whole number >= 0 (or null: no cap)"),
            (gate_value_ok(self.max_fallback_share),
             "summarization.max_fallback_share must be a number of summaries (e.g. 10) or "
             f"a percentage up to 100% (e.g. '5%'), got {quoted(self.max_fallback_share)}"),
            (
                self.on_low_fidelity in LOW_FIDELITY_POLICIES,
                f"summarization.on_low_fidelity must be one of "
                f"{', '.join(LOW_FIDELITY_POLICIES)}, got {quoted(self.on_low_fidelity)}",
            ),
            (
                self.summary_references in SUMMARY_REFERENCES,
                f"summarization.summary_references must be one of "
                f"{', '.join(SUMMARY_REFERENCES)}, got {quoted(self.summary_references)}",
            ),
            (self.request_timeout > 0, "summarization.request_timeout must be positive"),
            (self.max_input_tokens >= 512, "summarization.max_input_tokens must be >= 512"),
            (self.summary_tolerance >= 1, "summarization.summary_tolerance must be >= 1"),
            (
                self.summarizer in SUMMARIZER_BACKENDS,
                f"summarization.backend must be one of {', '.join(SUMMARIZER_BACKENDS)}, "
                f"got {quoted(self.summarizer)}",
            ),
            (
                "/" not in self.output_suffix and "\\" not in self.output_suffix
                and "\0" not in self.output_suffix,
                "output.output_suffix is added to a file or folder name, so it cannot "
                f"contain '/', '\\' or NUL, got {quoted(self.output_suffix)}",
            ),
            (
                self.output_format in OUTPUT_FORMATS,
                f"output.format must be one of {', '.join(OUTPUT_FORMATS)}, "
                f"got {quoted(self.output_format)}",
            ),
            (
                self.output_mode in OUTPUT_MODES,
                f"output.mode must be one of {', '.join(OUTPUT_MODES)}, "
                f"got {quoted(self.output_mode)}",
            ),
            (
                # A window's context is the live compressor's (head, one summary, recent
                # turns); masking inside windows is not defined yet.
                self.output_mode != "windows" or self.strategy == "summarize",
                "output.mode windows works with compression.strategy summarize only, "
                f"got {quoted(self.strategy)}",
            ),
            (self.max_concurrent_requests >= 1, "processing.max_concurrent_requests must be >= 1"),
            (self.per_trajectory_timeout > 0, "processing.per_trajectory_timeout must be positive"),
            (self.batch_rows >= 1, "processing.batch_rows must be >= 1"),
            (self.window_rows >= 1, "processing.window_rows must be >= 1"),
            (self.window_mb > 0, "processing.window_mb must be positive"),
            (self.checkpoint_rows >= 1, "processing.checkpoint_rows must be >= 1"),
            (self.checkpoint_seconds > 0, "processing.checkpoint_seconds must be positive"),
            (self.num_workers >= 1, "processing.num_workers must be >= 1"),
            (
                self.engine in ENGINES,
                f"processing.engine must be one of {', '.join(ENGINES)}, got {quoted(self.engine)}",
            ),
            (self.ray_actors is None or self.ray_actors >= 1,
             "processing.ray_actors must be >= 1"),
            (
                self.dataset_format in DATASET_FORMATS,
                f"dataset.format must be one of {', '.join(DATASET_FORMATS)}, "
                f"got {quoted(self.dataset_format)}",
            ),
            (
                self.token_counting in TOKEN_COUNTING,
                f"tokenizer.counting must be one of {', '.join(TOKEN_COUNTING)}, "
                f"got {quoted(self.token_counting)}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"{source}: {message}")

    def _check_key_names(self, source: str) -> None:
        """A key given where its variable's name goes is refused, and never repeated."""
        named = [("summarization.api_key_env (--api-key-env)", self.api_key_env)]
        named += [(f"summarization.endpoints[{i}].api_key_env", e.api_key_env)
                  for i, e in enumerate(self.endpoints) if isinstance(e, EndpointConfig)]
        for where, name in named:
            if isinstance(name, str) and name and looks_like_key(name):
                raise ConfigError(f"{source}: {where} names the environment variable that "
                                  f"holds the key (such as OPENROUTER_API_KEY), not the key "
                                  f"itself; got {masked(name)}")

    def summarization_endpoints(self) -> list[EndpointConfig]:
        """The pool's endpoints: the `endpoints` list, or the reference's single endpoint
        (whose key variable, when it is the default provider's, goes to that provider only).
        """
        if self.endpoints:
            return list(self.endpoints)
        return [EndpointConfig(self.base_url, self.summarization_model,
                               _key_env_for(self.base_url, self.api_key_env))]

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The values of every key variable the config names, and the passwords in its
        URLs: what is scrubbed from everything a run writes."""
        env = os.environ if environ is None else environ
        names = {self.api_key_env, *(e.api_key_env for e in self.endpoints)}
        values = [env[name] for name in sorted(n for n in names if n) if env.get(name)]
        for url in (self.base_url, *(e.base_url for e in self.endpoints)):
            try:
                password = urlsplit(url).password
            except ValueError:
                password = None
            if password:
                values += [password, unquote(password)]
        return values

    def with_endpoint_flags(
        self,
        base_urls: list[str] | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CompressionConfig:
        """Apply ``--base-url`` (repeatable), ``--model`` and ``--api-key-env``.

        Base URLs become the `endpoints` list, all with the same model. Their key comes
        from ``api_key_env``; without it, a URL that is a configured endpoint's (or
        ``summarization.base_url``) gets the variable configured for it when that
        variable is set, and any other URL gets no key: a key goes only where it was
        configured to go. Without base URLs, ``model`` and ``api_key_env`` override every
        configured endpoint's.
        """
        if base_urls:
            env = os.environ if environ is None else environ
            configured = {_same_url(e.base_url): e.api_key_env
                          for e in self.summarization_endpoints() if e.api_key_env}
            name = model or self.summarization_model
            endpoints = []
            for url in base_urls:
                key_env = api_key_env
                if key_env is None:
                    key_env = configured.get(_same_url(url))
                    key_env = key_env if key_env and env.get(key_env) else None
                endpoints.append(EndpointConfig(url, name, key_env))
            return self.replace(base_url=base_urls[0], summarization_model=name,
                                endpoints=endpoints)
        if model is None and api_key_env is None:
            return self
        endpoints = [dataclasses.replace(e, model=model or e.model,
                                         api_key_env=api_key_env or e.api_key_env)
                     for e in self.endpoints]
        return self.replace(summarization_model=model, api_key_env=api_key_env,
                            endpoints=endpoints)

    def run_settings(self) -> dict[str, Any]:
        """The settings that shape a run's rows, in the YAML schema (the metrics file's
        ``settings`` section; `report` reads them back with `from_dict`)."""
        wanted = {"tokenizer": ("name",), "compression": None, "protected_turns": None,
                  "summarization": ("backend", "model")}
        settings: dict[str, Any] = {}
        for section, keys in wanted.items():
            names = SECTIONS[section]
            settings[section] = {key: getattr(self, names[key])
                                 for key in (keys if keys is not None else names)}
        if self.chat_template:
            # Where the counting template is, for `validate` and `report` to count with it
            # again (the ``tokenizer`` section keeps its hash).
            settings["tokenizer"]["chat_template"] = str(Path(self.chat_template).resolve())
        model = self.model_that_runs()
        if model is None:
            del settings["summarization"]["model"]
        else:
            settings["summarization"]["model"] = model
        return settings

    def model_that_runs(self) -> str | None:
        """The model the summaries come from, by name: the endpoints' for `openai`, the
        named model's or the GGUF file's for `local`, None for `extractive` (no model)."""
        if self.summarizer == "extractive":
            return None
        if self.summarizer == "local":
            named = local_model_named(self.local_model)
            return named.title if named is not None else Path(str(self.local_model)).stem
        models = list(dict.fromkeys(e.model for e in self.endpoints))
        return ", ".join(models) if models else self.summarization_model

    def ignored_settings(self) -> list[str]:
        """A warning for each accepted-but-ignored key (`IGNORED_KEYS`) set to other than
        its default: the run does not do what that value asks."""
        defaults = CompressionConfig()
        return [f"{_key_of(attr)} is {quoted(getattr(self, attr))} but has no effect: {why}"
                for attr, why in IGNORED_KEYS.items()
                if getattr(self, attr) != getattr(defaults, attr)]

    def fingerprint_dict(self) -> dict[str, Any]:
        """The settings that decide the output rows (used to refuse a mismatched resume)."""
        data = dataclasses.asdict(self)
        for volatile in ("num_workers", "max_concurrent_requests", "request_timeout",
                         "batch_rows", "window_rows", "window_mb", "checkpoint_rows",
                         "checkpoint_seconds", "cache_enabled", "cache_path",
                         "metrics_enabled", "metrics_output_file", "max_retries", "retry_delay",
                         "allow_fallback", "allow_insecure_http", "engine", "ray_actors",
                         "breaker_failures", "breaker_cooldown", "max_fallback_share"):
            data.pop(volatile, None)
        # Checkpoints and metrics store this: URLs without their credentials.
        data["base_url"] = strip_url_credentials(data["base_url"])
        for endpoint in data["endpoints"]:
            endpoint["base_url"] = strip_url_credentials(endpoint["base_url"])
        return data


# Keys of the reference's schema accepted so that its configs load unchanged, but with no
# effect here (attribute -> why; docs/configuration.md). A value other than the default
# gets a warning (`ignored_settings`). The reference reads these too, and uses only
# `metrics.output_file` (as its metrics file name in directory mode).
IGNORED_KEYS: dict[str, str] = {
    "num_workers": "rows are summarized concurrently in one process, up to "
                   "processing.max_concurrent_requests requests, and tokens are counted in "
                   "batches; there are no worker processes to size",
    "skip_under_target": "a trajectory at or under compression.target_max_tokens is always "
                         "written unchanged (summarizing a row that fits only loses data)",
    "metrics_output_file": "the aggregate metrics are always <output stem>_metrics.json "
                           "beside the output, where `report` finds them",
}

# YAML section -> {yaml key: CompressionConfig attribute}; the reference's keys come first.
SECTIONS: dict[str, dict[str, str]] = {
    "tokenizer": {"name": "tokenizer_name", "trust_remote_code": "trust_remote_code",
                  "counting": "token_counting", "chat_template": "chat_template"},
    "compression": {
        "target_max_tokens": "target_max_tokens",
        "summary_target_tokens": "summary_target_tokens",
        "over_limit_strategy": "over_limit_strategy",
        "distill": "distill",
        "verify_distill": "verify_distill",
        "strategy": "strategy",
        "mask_keep_last": "mask_keep_last",
        "mask_exclude_tools": "mask_exclude_tools",
    },
    "protected_turns": {
        "first_system": "protect_first_system",
        "first_human": "protect_first_human",
        "first_gpt": "protect_first_gpt",
        "first_tool": "protect_first_tool",
        "last_n_turns": "protect_last_n_turns",
    },
    "summarization": {
        "model": "summarization_model",
        "base_url": "base_url",
        "api_key_env": "api_key_env",
        "temperature": "temperature",
        "max_retries": "max_retries",
        "retry_delay": "retry_delay",
        "backend": "summarizer",
        "endpoints": "endpoints",
        "request_timeout": "request_timeout",
        "max_input_tokens": "max_input_tokens",
        "cache": "cache_enabled",
        "cache_path": "cache_path",
        "local_model": "local_model",
        "summary_tolerance": "summary_tolerance",
        "allow_fallback": "allow_fallback",
        "allow_insecure_http": "allow_insecure_http",
        "breaker_failures": "breaker_failures",
        "breaker_cooldown": "breaker_cooldown",
        "min_fidelity": "min_fidelity",
        "on_low_fidelity": "on_low_fidelity",
        "max_invented": "max_invented",
        "summary_references": "summary_references",
        "max_fallback_share": "max_fallback_share",
    },
    "output": {
        "add_summary_notice": "add_summary_notice",
        "summary_notice_text": "summary_notice_text",
        "output_suffix": "output_suffix",
        "format": "output_format",
        "mode": "output_mode",
    },
    "processing": {
        "num_workers": "num_workers",
        "max_concurrent_requests": "max_concurrent_requests",
        "skip_under_target": "skip_under_target",
        "save_over_limit": "save_over_limit",
        "per_trajectory_timeout": "per_trajectory_timeout",
        "batch_rows": "batch_rows",
        "window_rows": "window_rows",
        "window_mb": "window_mb",
        "checkpoint_rows": "checkpoint_rows",
        "checkpoint_seconds": "checkpoint_seconds",
        "engine": "engine",
        "ray_actors": "ray_actors",
    },
    "dataset": {
        "format": "dataset_format",
        "messages": "dataset_messages",
        "role_tag": "dataset_role_tag",
        "content_tag": "dataset_content_tag",
        "user_tag": "dataset_user_tag",
        "assistant_tag": "dataset_assistant_tag",
        "observation_tag": "dataset_observation_tag",
        "function_tag": "dataset_function_tag",
        "system_tag": "dataset_system_tag",
        "system": "dataset_system",
        "tools": "dataset_tools",
        "summary_role": "summary_role",
    },
    "metrics": {
        "enabled": "metrics_enabled",
        "per_trajectory": "metrics_per_trajectory",
        "output_file": "metrics_output_file",
    },
}

_FIELD_TYPES: dict[str, str] = {
    "tokenizer_name": "str", "trust_remote_code": "bool",
    "target_max_tokens": "int", "summary_target_tokens": "int", "over_limit_strategy": "str",
    "distill": "str", "verify_distill": "bool", "strategy": "str", "mask_keep_last": "int",
    "mask_exclude_tools": "list",
    "protect_first_system": "bool", "protect_first_human": "bool",
    "protect_first_gpt": "bool", "protect_first_tool": "bool", "protect_last_n_turns": "int",
    "summarization_model": "str", "base_url": "str", "api_key_env": "str?",
    "temperature": "number?", "max_retries": "int", "retry_delay": "number",
    "summarizer": "str", "endpoints": "list", "request_timeout": "number",
    "max_input_tokens": "int", "cache_enabled": "bool", "cache_path": "str?",
    "local_model": "str?", "summary_tolerance": "number", "allow_fallback": "bool",
    "allow_insecure_http": "bool", "breaker_failures": "int", "breaker_cooldown": "number",
    "min_fidelity": "number?", "on_low_fidelity": "str", "max_invented": "int?",
    "summary_references": "str", "max_fallback_share": "gate?",
    "add_summary_notice": "bool", "summary_notice_text": "str", "output_suffix": "str",
    "output_format": "str", "output_mode": "str",
    "num_workers": "int", "max_concurrent_requests": "int", "skip_under_target": "bool",
    "save_over_limit": "bool", "per_trajectory_timeout": "number", "batch_rows": "int",
    "window_rows": "int", "window_mb": "number", "checkpoint_rows": "int",
    "checkpoint_seconds": "number", "engine": "str", "ray_actors": "int?",
    "metrics_enabled": "bool", "metrics_per_trajectory": "bool", "metrics_output_file": "str",
    "dataset_format": "str", "dataset_messages": "str?", "dataset_role_tag": "str?",
    "dataset_content_tag": "str?", "dataset_user_tag": "str?", "dataset_assistant_tag": "str?",
    "dataset_observation_tag": "str?", "dataset_function_tag": "str?",
    "dataset_system_tag": "str?", "dataset_system": "str?", "dataset_tools": "str?",
    "summary_role": "str?", "token_counting": "str", "chat_template": "str?",
}

_ENDPOINT_KEYS = [f.name for f in dataclasses.fields(EndpointConfig)]
_ENDPOINT_TYPES = {"api_key_env": "str?", "weight": "number", "max_concurrency": "int?",
                   "rpm": "int?", "tpm": "int?"}


# The summarization keys that name an endpoint (Hermes: model, base_url, api_key_env).
ENDPOINT_KEYS = ("backend", "model", "base_url", "api_key_env", "endpoints")


def _names_endpoint(summarization: Any) -> bool:
    """Whether a config's ``summarization`` section names a backend or an endpoint."""
    return isinstance(summarization, dict) and any(
        summarization.get(key) not in (None, "", []) for key in ENDPOINT_KEYS)


def _same_url(url: str) -> str:
    """``url`` as compared to decide whether two base URLs are one endpoint."""
    return url.strip().rstrip("/").lower()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or default


def _key_env_for(base_url: str, api_key_env: str | None) -> str | None:
    """``summarization.api_key_env`` for ``summarization.base_url``: the default provider's
    variable is not sent anywhere but to the default provider."""
    if not api_key_env:
        return None
    if api_key_env == DEFAULT_KEY_ENV and _origin(base_url) != _origin(DEFAULT_BASE_URL):
        return None
    return api_key_env


# A CI gate's limit: a number of rows or a percentage (`app.gates`).
GATE_VALUE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*")


def gate_value_ok(value: int | str | None) -> bool:
    """Whether ``value`` is a gate's limit: None, a whole number >= 0, ``N`` or ``P%``
    (P at most 100)."""
    if value is None:
        return True
    match = GATE_VALUE.fullmatch(str(value))
    if match is None or (isinstance(value, int) and value < 0):
        return False
    number = float(match.group(1))
    return number <= 100 if match.group(2) else number.is_integer()


def _type_ok(value: Any, expected: str) -> bool:
    if expected.endswith("?"):
        return value is None or _type_ok(value, expected[:-1])
    if expected == "bool":
        return isinstance(value, bool)
    if expected == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == "str":
        return isinstance(value, str)
    if expected == "gate":
        return _type_ok(value, "int") or isinstance(value, str)
    return isinstance(value, list)


def _type_name(expected: str) -> str:
    names = {"bool": "true or false", "int": "a whole number", "number": "a number",
             "str": "a string", "list": "a list",
             "gate": "a number of rows (e.g. 10) or a percentage (e.g. '1%')"}
    if expected.endswith("?"):
        return names[expected[:-1]] + " or null"
    return names[expected]


def _key_of(attr: str) -> str:
    for section, keys in SECTIONS.items():
        for key, target in keys.items():
            if target == attr:
                return f"{section}.{key}"
    return attr


def _unknown(source: str, name: str, valid: list[str], kind: str, prefix: str = "") -> str:
    leaf = name[len(prefix):] if prefix else name
    close = difflib.get_close_matches(leaf, valid, n=1, cutoff=0.5)
    hint = f"; did you mean '{prefix}{close[0]}'?" if close else (
        f"; valid {kind}s: {', '.join(prefix + v for v in valid)}"
    )
    return f"{source}: unknown {kind} {quoted(name)}{hint}"


def _endpoints(value: Any, source: str) -> list[EndpointConfig]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: summarization.endpoints must be a list of mappings")
    endpoints = []
    for i, item in enumerate(value):
        where = f"summarization.endpoints[{i}]"
        if isinstance(item, EndpointConfig):
            endpoints.append(item)
            continue
        if not isinstance(item, dict):
            raise ConfigError(f"{source}: {where} must be a mapping")
        for key in item:
            if key not in _ENDPOINT_KEYS:
                raise ConfigError(_unknown(source, f"{where}.{key}", _ENDPOINT_KEYS, "key",
                                           prefix=f"{where}."))
        if not isinstance(item.get("base_url"), str) or not isinstance(item.get("model"), str):
            raise ConfigError(f"{source}: {where} needs a base_url and a model (strings)")
        endpoint = EndpointConfig(**item)
        for key, expected in _ENDPOINT_TYPES.items():
            if not _type_ok(getattr(endpoint, key), expected):
                value = getattr(endpoint, key)
                shown = masked(value) if key == "api_key_env" else quoted(value)
                raise ConfigError(f"{source}: {where}.{key} must be {_type_name(expected)}, "
                                  f"got {shown}")
        for key in ("weight", "max_concurrency", "rpm", "tpm"):
            value = getattr(endpoint, key)
            # NaN compares false with everything: `value <= 0` alone lets it through.
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{source}: {where}.{key} must be positive and finite, "
                                  f"got {quoted(value)}")
        endpoints.append(endpoint)
    return endpoints
