"""Load the YAML settings (base + profile overlay + optional user file) into frozen dataclasses.

The sections are defined in `conf.settings_sections` and their values checked by `conf.settings_checks`;
`Settings`, the whole of them, is imported from here with `load_settings`.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from conf.errors import ConfigError
from conf.locations import parse_location
from conf.settings_checks import value_problems
from conf.settings_sections import Settings

__all__ = ["CONF_DIR", "PROFILES_DIR", "Settings", "available_profiles", "load_settings"]

CONF_DIR = Path(__file__).resolve().parent
PROFILES_DIR = CONF_DIR / "profiles"


def available_profiles() -> tuple[str, ...]:
    """Return the names of the profile overlays shipped in conf/profiles."""
    return tuple(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))


def load_settings(
    profile: str | None = None,
    home: str | os.PathLike[str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> Settings:
    """Build the settings of one profile from base.yaml, the profile overlay and an optional user file.

    Args:
        profile: profile name (a file in conf/profiles); default LAKEHOUSE_PROFILE, else "local".
        home: storage root; default the YAML `home`, else LAKEHOUSE_HOME, else ./.lakehouse.
        config_file: extra YAML overlaid last; default LAKEHOUSE_CONFIG when set.
        env: environment variables to read (default os.environ).
        overrides: `dotted.key=value` settings applied last (values read as YAML), e.g.
            `catalog.name=main` from `--set` on the command line or a job definition.

    Returns:
        The validated, frozen settings.

    Raises:
        ConfigError: listing every problem found, each naming the key and the bad value.
    """
    env = os.environ if env is None else env
    profile = profile or env.get("LAKEHOUSE_PROFILE") or "local"
    if profile not in available_profiles():
        # On its own: the profile decides which file is read, so nothing else can be checked without it.
        raise ConfigError(f"profile: unknown profile {profile!r} (available: {', '.join(available_profiles())})")
    # One pass: every file, every --set, every type and every value check add to the same list.
    problems: list[str] = []
    merged = _read_yaml(CONF_DIR / "base.yaml", problems)
    merged = _deep_merge(merged, _read_yaml(PROFILES_DIR / f"{profile}.yaml", problems))
    config_file = config_file or env.get("LAKEHOUSE_CONFIG")
    if config_file:
        merged = _deep_merge(merged, _read_yaml(Path(config_file), problems))
    for override in overrides:
        merged = _deep_merge(merged, _parse_override(override, problems))

    engine = merged.get("engine")
    if isinstance(engine, dict) and engine.get("kind") == "connect" and not engine.get("connect_url"):
        # The environment fallback is a Spark Connect URL: it means nothing to the other engines.
        merged["engine"] = {**engine, "connect_url": env.get("LAKEHOUSE_CONNECT_URL") or env.get("SPARK_REMOTE")}
    home_value = home or merged.get("home") or env.get("LAKEHOUSE_HOME") or ".lakehouse"
    if not isinstance(home_value, (str, os.PathLike)):
        problems.append(f"home: expected a path, got {home_value!r}")
        home_value = ".lakehouse"
    merged.pop("home", None)
    merged["profile"] = profile
    try:
        # A URL stays a URL (an object-storage home); a path is made absolute once, here.
        home_location = parse_location(home_value)
        if isinstance(home_location, Path):
            home_location = home_location.resolve()
    except ConfigError as exc:
        problems.extend(f"home: {problem}" for problem in exc.problems)
        home_location = Path(".lakehouse").resolve()

    bad: set[str] = set()
    settings = Settings(home=home_location, **_build(Settings, merged, "", problems, bad))
    problems.extend(value_problems(settings, bad))
    if problems:
        raise ConfigError(problems)
    return settings


def _read_yaml(path: Path, problems: list[str]) -> dict[str, Any]:
    if not path.exists():
        problems.append(f"{path}: config file does not exist")
        return {}
    if path.is_dir():
        problems.append(f"{path}: is a folder, not a config file")
        return {}
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as exc:
        problems.append(f"{path}: config file cannot be read ({exc.strerror or exc})")
        return {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: not valid YAML ({exc})")
        return {}
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        problems.append(f"{path}: the top level must be a mapping, got {type(loaded).__name__}")
        return {}
    return loaded


def _parse_override(override: str, problems: list[str]) -> dict[str, Any]:
    key, sep, text = override.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        problems.append(f"--set: {override!r} is not of the form dotted.key=value")
        return {}
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    nested: Any = value
    for part in reversed(_override_path(key.strip().split("."))):
        nested = {part: nested}
    return nested


def _override_path(parts: list[str]) -> list[str]:
    """Split a dotted --set key into nesting levels; below a mapping-typed setting the rest is one map key.

    `engine.spark_conf.spark.sql.shuffle.partitions` -> engine / spark_conf / spark.sql.shuffle.partitions.
    """
    cls: Any = Settings
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            break
        hints = typing.get_type_hints(cls)
        if part not in hints:
            break
        hint = _without_none(hints[part])
        if typing.get_origin(hint) is Mapping:
            rest = parts[i + 1 :]
            return parts[: i + 1] + ([".".join(rest)] if rest else [])
        cls = hint
    return parts


def _without_none(hint: Any) -> Any:
    """`X | None` -> X; any other hint unchanged."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# Settings that earlier versions accepted, and why they are gone: a file that still sets one is told so.
REMOVED_SETTINGS = {
    "retention.quarantine_days": "nothing read it: quarantined records are kept for good",
}


class _Invalid:
    """Marks a value that failed its type check; its key is in `bad` and its value checks are skipped."""


_INVALID = _Invalid()


def _build(cls: type, raw: Any, prefix: str, problems: list[str], bad: set[str]) -> dict[str, Any]:
    """Turn a raw mapping into constructor arguments of dataclass `cls`, collecting every problem.

    A field whose value has the wrong type is left out (the dataclass default stands in) and its key
    is added to `bad`, so the value checks skip it instead of reporting a second, misleading problem.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in sorted(set(raw) - names, key=str):
        removed = REMOVED_SETTINGS.get(f"{prefix}{key}")
        if removed:
            problems.append(f"{prefix}{key}: this setting was removed ({removed}); delete it")
        else:
            problems.append(f"{prefix}{key}: unknown setting (value {raw[key]!r})")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value = _coerce(hints[f.name], raw[f.name], f"{prefix}{f.name}", problems, bad)
        if value is not _INVALID:
            values[f.name] = value
    return values


def _coerce(hint: Any, value: Any, key: str, problems: list[str], bad: set[str]) -> Any:
    def invalid(expected: str) -> _Invalid:
        problems.append(f"{key}: expected {expected}, got {value!r}")
        bad.add(key)
        return _INVALID

    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        return _coerce(_without_none(hint), value, key, problems, bad)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            # Also null: a section set to null must not silently fall back to the defaults.
            return invalid("a mapping (a settings section)")
        return hint(**_build(hint, value, f"{key}.", problems, bad))
    if hint is Path:
        return Path(value) if isinstance(value, (str, os.PathLike)) else invalid("a path")
    if origin is tuple:
        if not isinstance(value, list):
            return invalid("a list")
        items = tuple(_coerce(args[0], v, f"{key}[{i}]", problems, bad) for i, v in enumerate(value))
        if any(item is _INVALID for item in items):
            bad.add(key)
            return _INVALID
        return items
    if origin is Mapping:
        if not isinstance(value, dict):
            return invalid("a mapping")
        coerced = {str(k): _coerce(args[1], v, f"{key}.{k}", problems, bad) for k, v in value.items()}
        return types.MappingProxyType({k: v for k, v in coerced.items() if v is not _INVALID})
    if hint is bool:
        return value if isinstance(value, bool) else invalid("true or false")
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else invalid("a whole number")
    if hint is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else invalid("a number")
    if hint is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value if isinstance(value, str) else invalid("a string")
    raise TypeError(f"unsupported setting type {hint!r} for {key}")
