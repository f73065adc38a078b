"""What ``pip install .`` installs: every package of the checkout (``privsql serve`` failed
with "No module named privsql.server" from an install, while the tests, run from the
checkout, passed; red team 15)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_of_the_checkout_is_installed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("privsql", "rewriter", "udfs")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == listed
