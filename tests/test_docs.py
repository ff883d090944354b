"""The front page and the reference pages: size, links that resolve, and a CLI reference that is complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from pipelines.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    targets = [a or b for a, b in LINK.findall(text)]
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


def test_the_front_page_is_at_most_300_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_and_a_missing_anchor_are_reported(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Some `code` section\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#some-code-section) [gone](missing.md) [bad](a.md#nope) [web](https://x.org/y) `[no](x.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["missing.md: no such file", "a.md#nope: no heading #nope in a.md"]


def command_paths(command, prefix=()) -> list[str]:
    if not hasattr(command, "list_commands"):
        return [" ".join(prefix)]
    context = typer.main.click.Context(command) if hasattr(typer.main, "click") else None
    paths = []
    for name in command.list_commands(context):
        paths += command_paths(command.get_command(context, name), (*prefix, name))
    return paths


def test_the_cli_reference_covers_every_command():
    reference = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    commands = command_paths(typer.main.get_command(app))
    assert len(commands) > 30
    assert [c for c in commands if f"`lakehouse {c}`" not in reference] == []
