"""A finished run's metrics file read back and checked, and the settings it recorded.

`report` and `validate` trust what this returns: a file that is not JSON, not an object,
or whose sections have the wrong types (damaged, hand-edited, or some other program's
JSON) is an `InputError` naming the file and what is wrong (exit 2), never a crash deep in
a report (exit 4).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig
from ..core.errors import ConfigError, InputError
from ..core.metrics import AggregateMetrics, TrajectoryMetrics
from ..formats.bounded import METRICS_CAP, SidecarUnreadable, read_bounded

# Sections a metrics file holds, with the type each must have when present, and the keys
# inside them that `report`, `validate` and the gates read as numbers.
_SECTIONS: dict[str, type] = {
    "summary": dict, "tokens": dict, "turns": dict, "averages": dict, "summarization": dict,
    "processing": dict, "usage": dict, "distributions": dict, "fidelity": dict,
    "over_limit": dict, "settings": dict, "tokenizer": dict, "run": dict,
}
_SUMMARY_COUNTS = ("total_trajectories", "trajectories_compressed",
                   "trajectories_skipped_under_target", "trajectories_still_over_limit",
                   "trajectories_failed", "rows_rejected")
_MAPPINGS = (("summarization", "summaries_by_source"), ("over_limit", "reasons"),
             ("distributions", "tokens_before"), ("distributions", "tokens_after"))
_TEXT_OR_NULL = frozenset({"summary_source"})  # null in an empty metrics object, else text
_FIX = "it is damaged, edited or not one compress wrote (delete it or compress again)"


def read_metrics(path: Path) -> dict[str, Any] | None:
    """The metrics file at ``path`` (None when there is none), checked: `InputError`
    naming the file and the first thing wrong with it otherwise."""
    if not path.exists():
        return None
    try:
        data = json.loads(read_bounded(path, "metrics file", METRICS_CAP))
    except SidecarUnreadable as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"cannot read the metrics file {path}: {exc.strerror or exc}") \
            from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise InputError(f"metrics file {path} is not valid JSON ({exc}); {_FIX}") from None
    problem = metrics_problem(data)
    if problem is not None:
        raise InputError(f"metrics file {path}: {problem}; {_FIX}")
    return data


def metrics_problem(data: Any) -> str | None:
    """What makes ``data`` unusable as a run's metrics, or None."""
    if not isinstance(data, dict):
        return f"the top level is {_kind(data)}, not an object"
    if "summary" not in data:
        return "no 'summary' section"
    for section, kind in _SECTIONS.items():
        if section in data and not isinstance(data[section], kind):
            return f"'{section}' is {_kind(data[section])}, not an object"
    for key in _SUMMARY_COUNTS:
        value = data["summary"].get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            return f"summary.{key} is {value!r}, not a count"
    for section, key in _MAPPINGS:
        value = data.get(section, {}).get(key)
        if value is not None and not isinstance(value, dict):
            return f"{section}.{key} is {_kind(value)}, not an object"
        if key in ("summaries_by_source", "reasons") and value:
            odd = next((k for k, v in value.items() if not _is_number(v)), None)
            if odd is not None:
                return f"{section}.{key}.{odd} is {value[odd]!r}, not a count"
    mismatch = shape_mismatch(AggregateMetrics().to_dict(), data)
    if mismatch is not None:
        return mismatch
    high = data.get("distributions", {}).get("tokens_before", {}).get("max")
    if high is not None and (isinstance(high, bool) or not isinstance(high, int)):
        return f"distributions.tokens_before.max is {high!r}, not a count"
    counting = data.get("tokenizer", {}).get("counting")
    if counting is not None and not isinstance(counting, str):
        return f"tokenizer.counting is {counting!r}, not a name"
    return None


def over_limit_entry_problem(entry: Any) -> str | None:
    """What makes one line of an over-limit file unusable, or None."""
    if not isinstance(entry, dict):
        return f"the line is {_kind(entry)}, not an object"
    metrics = entry.get("metrics")
    if metrics is None:
        return None
    if not isinstance(metrics, dict):
        return f"'metrics' is {_kind(metrics)}, not an object"
    found = shape_mismatch(TrajectoryMetrics().to_dict(), metrics, "metrics.")
    numbers = entry.get("reason_numbers")
    if found is None and numbers is not None and not isinstance(numbers, dict):
        return f"'reason_numbers' is {_kind(numbers)}, not an object"
    return found


def recorded_config(metrics: dict[str, Any], path: Path) -> CompressionConfig | None:
    """The settings the run recorded (its ``settings`` section, and the counting mode of
    its ``tokenizer`` section), or None when it recorded none. A value `compress` would
    refuse is a `ConfigError` naming ``path``."""
    settings = metrics.get("settings")
    if settings is None:
        return None
    config = CompressionConfig.from_dict(settings, source=f"metrics file {path}")
    counting = metrics.get("tokenizer", {}).get("counting")
    if counting is not None:
        config = dataclasses.replace(config, token_counting=counting)
        config.validate(f"metrics file {path}")
    return config


def recorded_template(metrics: dict[str, Any]) -> str | None:
    """The hash of the chat-template file the run counted with (None: the tokenizer's own
    template, or no template counting)."""
    digest = metrics.get("tokenizer", {}).get("template_sha256")
    return digest if isinstance(digest, str) and digest != "tokenizer" else None


def check_template(metrics: dict[str, Any], path: Path, config: CompressionConfig) -> None:
    """`ConfigError` when the run counted with a template file the checks cannot get: the
    metrics file keeps its hash, not its path, so it must be given again."""
    if (config.token_counting == "chat_template" and recorded_template(metrics) is not None
            and not config.chat_template):
        raise ConfigError(f"the run counted with a chat-template file (sha256 "
                          f"{recorded_template(metrics)}, recorded in {path}); give the same "
                          "file with --chat-template")


def shape_mismatch(template: dict[str, Any], data: dict[str, Any], where: str = "") \
        -> str | None:
    """The first value of ``data`` whose type differs from the same key's in ``template``
    (what `to_dict` of an empty metrics object returns): numbers where numbers are, text
    where text is, objects where objects are; a null in ``template`` takes a number or
    null (text too for `_TEXT_OR_NULL`). Keys ``template`` does not have are not looked at."""
    for key, expected in template.items():
        if key not in data:
            continue
        value, name = data[key], f"{where}{key}"
        if isinstance(expected, dict):
            if not isinstance(value, dict):
                return f"{name} is {_kind(value)}, not an object"
            found = shape_mismatch(expected, value, name + ".")
            if found is not None:
                return found
        elif isinstance(expected, bool):
            if not isinstance(value, bool):
                return f"{name} is {value!r}, not true or false"
        elif isinstance(expected, (int, float)):
            if not _is_number(value):
                return f"{name} is {value!r}, not a number"
        elif isinstance(expected, str):
            if not isinstance(value, str):
                return f"{name} is {value!r}, not text"
        elif expected is None and value is not None and not _is_number(value) \
                and not (key in _TEXT_OR_NULL and isinstance(value, str)):
            return f"{name} is {value!r}, not a number or null"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


@dataclasses.dataclass(frozen=True)
class CheckSettings:
    """The settings `validate` checks an output against, the run's metrics (None: no
    metrics file) and, in words, where the settings came from."""

    config: CompressionConfig
    metrics: dict[str, Any] | None
    origin: str
    path: Path | None = None  # the metrics file
    same_counting: bool = False  # counts as the run did (its tokenizer, mode, template)

    def describe(self) -> str:
        """``target 300, summary 50, counting turns, tokenizer deepseek-v4; settings from
        out_metrics.json``."""
        c = self.config
        counting = c.token_counting + (f" with {Path(c.chat_template).name}"
                                       if c.token_counting == "chat_template"
                                       and c.chat_template else "")
        return (f"target {c.target_max_tokens:,}, summary {c.summary_target_tokens:,}, "
                f"counting {counting}, tokenizer {c.tokenizer_name}; {self.origin}")


def check_settings(output: Path, base: CompressionConfig | None, overrides: dict[str, Any],
                   default: tuple[str, CompressionConfig], *,
                   base_keys: frozenset[str] = frozenset(),
                   base_name: str = "--config") -> CheckSettings:
    """What to check ``output`` against: ``base`` (a --config file, ``base_keys`` the
    ``section.key`` names it sets) when given, else the settings its metrics file
    recorded, else ``default`` (label, config); then the ``overrides`` (flag name ->
    value, None: not given) on top.

    A --config file wins over the recorded settings, but for the counting mode and the
    chat-template file it does not set: those stay the run's (a count in another mode is
    not the run's count). A chat-template file that is named but missing is a
    `ConfigError`, as is a run that counted with a template file the checks cannot get.
    """
    from ..engine.layout import finished_layout

    path = finished_layout(output).metrics
    metrics = read_metrics(path)
    recorded = recorded_config(metrics, path) if metrics is not None else None
    if base is not None:
        config, origin = base, f"settings from {base_name} (over the run's own)"
        if recorded is not None:
            kept = {field: getattr(recorded, field) for key, field in _KEPT.items()
                    if key not in base_keys and getattr(recorded, field) is not None}
            if kept != {f: getattr(base, f) for f in kept}:
                config = dataclasses.replace(config, **kept)
                origin += ", with the run's " + " and ".join(
                    _KEPT_LABEL[f] for f in kept if getattr(base, f) != kept[f])
    elif recorded is not None:
        config, origin = recorded, f"settings from {path.name}"
    elif metrics is not None:
        config, origin = default[1], f"{path.name} records no settings: {default[0]}"
    else:
        config, origin = default[1], f"no metrics file beside it: {default[0]}"
    given = {flag: value for flag, value in overrides.items() if value is not None}
    config = config.replace(**{_FIELDS[flag]: value for flag, value in given.items()})
    if given:
        origin += ", " + ", ".join(given) + " from the command line"
    if config.token_counting == "chat_template" and config.chat_template \
            and not Path(config.chat_template).is_file():
        raise ConfigError(f"the chat-template file {config.chat_template} to count with is "
                          "missing (the run recorded it"
                          + (f" in {path.name}" if metrics is not None else "")
                          + "); give the same template with --chat-template")
    same = False
    if metrics is not None:
        check_template(metrics, path, config)
        changed = _identity_changes(metrics, config)
        if changed:
            origin += f" (differs from the run's {' and '.join(changed)})"
        same = bool(metrics.get("tokenizer")) and not changed
    return CheckSettings(config, metrics, origin, path, same)


# What a --config file does not replace unless it sets it: the run's way of counting.
_KEPT = {"tokenizer.counting": "token_counting", "tokenizer.chat_template": "chat_template"}
_KEPT_LABEL = {"token_counting": "counting mode", "chat_template": "chat template"}


# Flags `validate` takes for the settings, and the config field each sets.
_FIELDS = {"--target-max-tokens": "target_max_tokens",
           "--summary-target-tokens": "summary_target_tokens",
           "--token-counting": "token_counting", "--tokenizer": "tokenizer_name",
           "--chat-template": "chat_template", "--format": "dataset_format"}


def _identity_changes(metrics: dict[str, Any], config: CompressionConfig) -> list[str]:
    """Which of the run's tokenizer files, counting mode and template ``config`` counts
    differently (from the hashes its metrics file records)."""
    from ..counting.identity import tokenizer_identity

    recorded = metrics.get("tokenizer", {})
    if not recorded:
        return []
    now = tokenizer_identity(config)
    names = {"name": "tokenizer", "files_sha256": "tokenizer files",
             "counting": "counting mode", "template_sha256": "chat template"}
    changed = [label for key, label in names.items()
               if key in recorded and recorded.get(key) != now.get(key)]
    if "tokenizer" in changed:  # another tokenizer has other files, said once
        changed = [label for label in changed if label != "tokenizer files"]
    return changed
