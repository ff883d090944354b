"""Secrets of settings (passwords, tokens): the first line of a file the settings name, else an environment variable.

Settings hold where a secret is, never the secret: it stays out of config files, command lines and logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from conf.errors import ConfigError


def read_secret(
    file_key: str, path: str | None, env_key: str, variable: str | None, env: Mapping[str, str] = os.environ
) -> str | None:
    """The secret in the file at `path` (its first line), else in the environment variable `variable`.

    Args:
        file_key: the setting that names the file (for errors).
        path: the file, or None.
        env_key: the setting that names the variable (for errors).
        variable: the variable's name, or None.
        env: the environment.

    Returns:
        The secret; None when no file is named and the variable is unset or empty.

    Raises:
        ConfigError: a named file that cannot be read or is empty, naming `file_key` and the file.
    """
    if path:
        where = Path(path).expanduser()
        try:
            lines = where.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"{file_key}: {str(where)!r} cannot be read: {exc.strerror}") from None
        if not lines or not lines[0]:
            raise ConfigError(f"{file_key}: {str(where)!r} is empty")
        return lines[0]
    return env.get(variable) or None if variable else None
