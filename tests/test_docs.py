"""The documentation says what the tool does, for its users, and its links and generated pages hold."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "results" / "README.md", *DOCS]
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")
# Project history has no place in README or docs/: numbered device calls, sessions, issue numbers.
HISTORY = re.compile(r"\b(session|issue \d+|issue #\d+|calls? \d+|device-calls/)\b", re.IGNORECASE)


def test_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)


def test_readme_first_screen_gives_both_commands():
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert "kitctl run maxbatch" in first  # sets up and runs the main job
    assert "bash .ci/setup.sh && python3 -m pytest" in first  # sets up and runs the tests
    assert "python3 -m pytest" in (ROOT / ".ci" / "run").read_text()  # CI runs README's test command


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_no_project_history_in_user_pages(page):
    found = [f"{i}: {line.strip()[:120]}" for i, line in enumerate(page.read_text().splitlines(), 1)
             if HISTORY.search(line)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    broken = [target for target, _ in LINK.findall(text)
              if "://" not in target and not target.startswith("mailto:")
              and not (page.parent / target).exists()]
    assert not broken, broken


def test_artifact_field_page_is_what_the_schema_gives():
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "schema_doc.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_source_cites_docs_not_a_file_outside_the_repository():
    cited = [str(f.relative_to(ROOT)) for f in (ROOT / "host").rglob("*.py") if "DESIGN.md" in f.read_text()]
    assert not cited, cited
