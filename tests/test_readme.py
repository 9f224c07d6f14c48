"""README.md, the front door, tells what is true: every experiment file is in it, every
registered backend has its section, and every ``testbed <command>`` it shows exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import typer.main

from testbed.backends import BACKENDS, get_backend
from testbed.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
get_backend("local")  # (imports the built-ins, which register themselves)


def _code(text: str) -> list[str]:
    """Every code block and inline code span of ``text``."""
    blocks = re.findall(r"```.*?\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    return [*blocks, *re.findall(r"`([^`\n]+)`", rest)]


def _commands(text: str) -> set[str]:
    """The ``X`` of every ``testbed X`` in ``text``'s code (the package's paths, such as
    ``testbed/backends``, are not commands)."""
    return {
        m.group(1)
        for code in _code(text)
        for m in re.finditer(r"(?:^|[\s(])testbed ([a-z][\w-]*)", code, flags=re.M)
    }


def _table_files(text: str) -> set[str]:
    """The files of the experiments table (its rows' first cells)."""
    section = text.split("## Experiments", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([\w.]+\.yaml)` \|", section, flags=re.M))


def _backend_sections(text: str) -> set[str]:
    return set(re.findall(r"^### `--backend ([\w-]+)`", text, flags=re.M))


def _cli_commands() -> set[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    return set(group.commands)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (ROOT / "experiments").glob("*.yaml"))
)
def test_every_experiment_is_in_the_readme(name: str) -> None:
    assert name in _table_files(README), f"README.md's experiments table lacks {name}"


def test_every_backend_has_a_section() -> None:
    """Every registered built-in backend (not one a test registers, such as
    tests/test_extensions.py's ``local-nice``)."""
    builtin = {n for n in BACKENDS.names() if BACKENDS[n].__module__.startswith("testbed.")}
    assert {"local", "docker", "compose", "simulation"} <= builtin
    missing = builtin - _backend_sections(README)
    assert not missing, f"README.md has no section for --backend {missing}"


def test_every_command_shown_exists() -> None:
    shown, cli = _commands(README), _cli_commands()
    assert {"run", "validate", "show", "up"} <= shown  # (the parser finds them)
    assert shown <= cli, f"README.md shows commands the CLI lacks: {shown - cli}"


def test_the_checks_catch_what_is_missing() -> None:
    """Each check fails on a README with one name removed or one command made up."""
    assert "gaia.yaml" not in _table_files(README.replace("| `gaia.yaml` |", "| gaia |"))
    cut = README.replace("### `--backend compose`", "### compose")
    assert "compose" not in _backend_sections(cut)
    assert "frobnicate" in _commands(README + "\n`testbed frobnicate RUN`\n")
    assert "backends" not in _commands("`testbed/backends/base.py`")


def test_readme_links_contributing() -> None:
    assert "(CONTRIBUTING.md)" in README
