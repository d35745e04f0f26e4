"""Which config file a command reads: the one named (``--config``), none (``--no-config``),
or the user's own at a documented path; never a file that merely lies in the working
folder (a training repository's ``configs/default.yaml`` is some other program's)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.config import CompressionConfig
from ..core.errors import ConfigError

USER_CONFIG_SHOWN = "$XDG_CONFIG_HOME/trajectory-compressor/config.yaml"
# In --help, the path in pieces a narrow terminal can wrap between.
USER_CONFIG_HELP = ("config.yaml in the folder trajectory-compressor of $XDG_CONFIG_HOME "
                    "(or of ~/.config when XDG_CONFIG_HOME is unset)")


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the user's own config lives: ``$XDG_CONFIG_HOME`` (when set to an absolute
    path, as the XDG base directory spec asks), else ``~/.config``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return folder / "trajectory-compressor" / "config.yaml"


@dataclass(frozen=True)
class ConfigChoice:
    """The config a command runs with, and in words where it came from."""

    config: CompressionConfig
    origin: str
    path: Path | None = None


def choose_config(named: Path | None, no_config: bool = False,
                  environ: Mapping[str, str] | None = None) -> ConfigChoice:
    """``named`` (``--config``) when given; nothing with ``no_config``; else the user's
    config file when it exists; else built-in defaults with the summarizer left to `auto`."""
    if named is not None and no_config:
        raise ConfigError("give --config FILE or --no-config, not both")
    if named is not None:
        if not named.exists():
            raise ConfigError(f"config file not found: {named}")
        return ConfigChoice(CompressionConfig.from_yaml(named), f"--config {named}", named)
    if not no_config:
        user = user_config_path(environ)
        if user.is_file():
            return ConfigChoice(CompressionConfig.from_yaml(user), f"user config {user}", user)
    # No config file: the summarizer follows what this machine has (`default_summarizer`).
    return ConfigChoice(CompressionConfig(summarizer="auto"),
                        "no config file (--no-config)" if no_config else "built-in defaults")


def config_keys(path: Path) -> frozenset[str]:
    """The ``section.key`` names a config file sets (it loaded already: a file that does
    not is the loader's error, and gives none here)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return frozenset()
    if not isinstance(data, dict):
        return frozenset()
    return frozenset(f"{section}.{key}" for section, values in data.items()
                     if isinstance(values, dict) for key in values)
