"""Layers import only downward, and the jobs and services never import each other.

The order, from the bottom: conf; bronze, silver, gold (and the generator); pipelines/runtime, then
pipelines/audit_trail and pipelines/privacy (what every process shares); the jobs and
services (pipelines/batch, bi, subscriptions, serving), none importing another; pipelines/orchestration;
pipelines/cli; pipelines/bench. Every package of the tree is in ALLOWED, so a new one fails the test
until its place is written down.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_LAYERS = {"conf", "bronze", "silver", "gold"}
# What every job, service and command shares above runtime: the audit chain's keys and report formats,
# the identities that privacy keeps apart from the events.
_SHARED = {"pipelines.audit_trail", "pipelines.privacy"}
_BELOW_JOBS = _LAYERS | {"pipelines.runtime"} | _SHARED
_JOBS = {"pipelines.batch", "pipelines.bi", "pipelines.subscriptions", "pipelines.serving"}
# package -> the project packages it may import (besides itself)
ALLOWED = {
    "conf": set(),
    "bronze": {"conf"},
    "silver": {"conf", "bronze"},
    "gold": {"conf", "bronze", "silver"},
    "datagen": {"conf", "bronze"},
    "pipelines.runtime": _LAYERS,
    **{shared: _LAYERS | {"pipelines.runtime"} for shared in _SHARED},
    **{job: _BELOW_JOBS for job in _JOBS},
    "pipelines.orchestration": _BELOW_JOBS | _JOBS,
    "pipelines.cli": _BELOW_JOBS | _JOBS | {"pipelines.orchestration", "datagen"},
    "pipelines.bench": _BELOW_JOBS | _JOBS | {"pipelines.orchestration", "pipelines.cli", "datagen"},
}
PROJECT_TOP = {"conf", "bronze", "silver", "gold", "datagen", "pipelines"}


def package_of(module: str) -> str:
    """The package a module belongs to: its top-level package, or `pipelines.<name>` under pipelines/."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "pipelines" and len(parts) > 1 else parts[0]


def imported_modules(source: str, module: str) -> set[tuple[str, int]]:
    """Return (imported module, line) of every project import in `source`, relative imports resolved from `module`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {(alias.name, node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolves inside the module's own package
                base = module.split(".")[: -node.level]
                found.add((".".join([*base, node.module] if node.module else base), node.lineno))
            elif node.module:
                found.add((node.module, node.lineno))
    return {(name, line) for name, line in found if name.split(".")[0] in PROJECT_TOP}


def violations(root: Path) -> list[str]:
    """Every import of a package its package may not import, as 'path:line imports package'."""
    problems = []
    for path in sorted(p for top in PROJECT_TOP for p in (root / top).rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        own = package_of(module)
        if module == "pipelines.__init__" or module == "pipelines":
            continue
        if own not in ALLOWED:
            problems.append(f"{path.relative_to(root)}: package {own} has no place in the layer order")
            continue
        for imported, line in sorted(imported_modules(path.read_text(encoding="utf-8"), module), key=lambda item: item[::-1]):
            target = package_of(imported)
            if target != own and target not in ALLOWED[own]:
                problems.append(f"{path.relative_to(root)}:{line} imports {target}")
    return problems


def test_every_package_imports_only_downward():
    assert violations(ROOT) == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("bronze/mod.py", "from silver.state import x\n", "bronze/mod.py:1 imports silver"),
        ("silver/mod.py", "import os\nimport gold.audit\n", "silver/mod.py:2 imports gold"),
        ("gold/mod.py", "def f():\n    from pipelines.runtime import io\n", "gold/mod.py:2 imports pipelines.runtime"),
        ("conf/mod.py", "from bronze import records\n", "conf/mod.py:1 imports bronze"),
        ("pipelines/runtime/mod.py", "from pipelines.batch.jobs import x\n", "pipelines/runtime/mod.py:1 imports pipelines.batch"),
        ("pipelines/serving/mod.py", "from pipelines.batch import x\n", "pipelines/serving/mod.py:1 imports pipelines.batch"),
        ("pipelines/batch/mod.py", "import pipelines.subscriptions.store\n", "pipelines/batch/mod.py:1 imports pipelines.subscriptions"),
        ("pipelines/batch/mod.py", "from pipelines.cli.console import x\n", "pipelines/batch/mod.py:1 imports pipelines.cli"),
        ("pipelines/cli/mod.py", "from pipelines.bench import search\n", "pipelines/cli/mod.py:1 imports pipelines.bench"),
        ("pipelines/orchestration/mod.py", "from pipelines.cli import app\n", "pipelines/orchestration/mod.py:1 imports pipelines.cli"),
        ("pipelines/batch/sub/mod.py", "from ...cli import app\n", "pipelines/batch/sub/mod.py:1 imports pipelines.cli"),
        ("pipelines/newthing/mod.py", "import conf\n", "pipelines/newthing/mod.py: package pipelines.newthing has no place in the layer order"),
    ],
)
def test_an_upward_or_sideways_import_is_reported_with_its_place(tmp_path, module, source, expected):
    (tmp_path / module).parent.mkdir(parents=True)
    (tmp_path / module).write_text(source, encoding="utf-8")
    assert violations(tmp_path) == [expected]


def test_a_downward_import_is_allowed(tmp_path):
    sources = {
        "gold/mod.py": "from silver.events import x\nfrom bronze import y\nimport conf\n",
        "pipelines/serving/mod.py": "from pipelines.runtime.io import x\nfrom gold.search import y\nfrom .rows import z\n",
        "pipelines/orchestration/mod.py": "from pipelines.batch import refine\nfrom pipelines.bi.server import x\n",
        "pipelines/bench/mod.py": "from pipelines.cli.console import console\nimport datagen\n",
    }
    for module, source in sources.items():
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text(source, encoding="utf-8")
    assert violations(tmp_path) == []
