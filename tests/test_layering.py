"""Layers import only downward: bronze <- silver <- gold, none of them from pipelines/ (or the generator)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> the project packages it must not import
FORBIDDEN = {
    "conf": {"bronze", "silver", "gold", "pipelines", "datagen"},
    "bronze": {"silver", "gold", "pipelines", "datagen"},
    "silver": {"gold", "pipelines", "datagen"},
    "gold": {"pipelines", "datagen"},
    "datagen": {"pipelines"},
}


def imported_packages(source: str, module: str) -> set[tuple[str, int]]:
    """Return (top-level package, line) of every import in `source`, relative imports resolved from `module`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolves inside the module's own package
                found.add((module.split(".")[0], node.lineno))
            elif node.module:
                found.add((node.module.split(".")[0], node.lineno))
    return found


def violations(root: Path) -> list[str]:
    """Every import of a layer module from a package above it, as 'path:line imports package'."""
    problems = []
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            for imported, line in sorted(imported_packages(path.read_text(encoding="utf-8"), module)):
                if imported in forbidden:
                    problems.append(f"{path.relative_to(root)}:{line} imports {imported}")
    return problems


def test_every_layer_imports_only_downward():
    assert violations(ROOT) == []


@pytest.mark.parametrize(
    ("package", "source", "expected"),
    [
        ("bronze", "from silver.state import x\n", "bronze/mod.py:1 imports silver"),
        ("silver", "import os\nimport gold.audit\n", "silver/mod.py:2 imports gold"),
        ("gold", "def f():\n    from pipelines.runtime import io\n", "gold/mod.py:2 imports pipelines"),
        ("conf", "from bronze import records\n", "conf/mod.py:1 imports bronze"),
    ],
)
def test_an_upward_import_is_reported_with_its_place(tmp_path, package, source, expected):
    for name in FORBIDDEN:
        (tmp_path / name).mkdir()
    (tmp_path / package / "mod.py").write_text(source, encoding="utf-8")
    assert violations(tmp_path) == [expected]


def test_a_downward_import_is_allowed(tmp_path):
    for name in FORBIDDEN:
        (tmp_path / name).mkdir()
    (tmp_path / "gold" / "mod.py").write_text("from silver.events import x\nfrom bronze import y\nimport conf\n")
    assert violations(tmp_path) == []
