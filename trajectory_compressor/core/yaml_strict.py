"""YAML as a config file is read: PyYAML's safe loader, except that a key given twice in
one mapping is an error naming both lines (PyYAML keeps the last one silently, so a
setting written twice would take whichever came last without a word)."""

from __future__ import annotations

from typing import Any

import yaml

from .errors import ConfigError
from .quote import quoted


class _StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses duplicate keys."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *alias` merges keys on purpose
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the loader says what is wrong with it
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise _Duplicate(key, first, line)
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


class _Duplicate(Exception):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(key, first, second)
        self.key, self.first, self.second = key, first, second


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_config_yaml(text: str, source: str) -> Any:
    """The YAML document ``text`` (of the file ``source``); `ConfigError` when it is not
    valid YAML or a mapping gives one key twice (both lines named)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except _Duplicate as dup:
        raise ConfigError(f"config file {source}: the key {quoted(dup.key)} is given twice, "
                          f"on line {dup.first} and on line {dup.second}; keep one") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {source} is not valid YAML: {exc}") from None
