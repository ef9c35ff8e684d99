"""README.md and docs/*.md name only what is in the repository: every relative link (and its #anchor) resolves, and
every repository path they name in code spans exists. Nothing outside the checkout is named as if it were in it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tollgate.testing.requirements import nonempty
from tollgate.testing.tools import repo_root

ROOT = repo_root()
DOCS = [ROOT / "README.md", *nonempty(sorted((ROOT / "docs").glob("*.md")), "docs/*.md")]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def tracked_top_level() -> set[str]:
    """The checkout's top-level entries, as git knows them (what a fresh clone has)."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {line.split("/", 1)[0] for line in files.splitlines()}


TOP = tracked_top_level()
OUTSIDE = ("../", "seeds/")  # the project's directory beside the checkout, the seeds: not in a clone


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    text = FENCE.sub("", doc.read_text())
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def named_paths(text: str) -> list[str]:
    """Words of code spans that name a repository path (they start with one of its top-level entries, or are a
    Markdown file's name), or a path outside it."""
    paths = []
    for span in CODE_SPAN.findall(FENCE.sub("", text)):
        for word in span.split():
            word = re.sub(r"(\[.*\]|::\w+|[),:;.]+)$", "", word.strip("'\"("))
            top = word.split("/", 1)[0]
            if word.startswith(OUTSIDE) or (top in TOP and "/" in word) or re.fullmatch(r"[\w.-]+\.md", word):
                paths.append(word)
    return paths


def ignored(path: str) -> bool:
    """What .gitignore names is made by a build or a run (vendored charts, .dev), not a file of the repository."""
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False).returncode == 0


def exists(path: str) -> bool:
    """<placeholders>, {placeholders} and * match by globbing; a bare Markdown name is looked for in docs/ too."""
    if path.startswith(OUTSIDE):
        return False
    pattern = re.sub(r"<[^>]+>|\{[^}]+\}", "*", path.rstrip("/"))
    candidates = [pattern, f"docs/{pattern}"] if "/" not in pattern else [pattern]
    found = any(any(ROOT.glob(c)) if "*" in c else (ROOT / c).exists() for c in candidates)
    return found or ignored(path.rstrip("/") + "/")


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (doc.parent / file).resolve() if file else doc
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_repository_path_named_exists(doc: Path) -> None:
    missing = sorted({path for path in named_paths(doc.read_text()) if not exists(path)})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that are not in the repository: {missing}"


def test_the_path_finder_sees_paths_and_placeholders() -> None:
    text = "`services/xds/src/tollgate/xds/translate.py`, `.venv/bin/python bench/allocator.py`, `.dev/logs/x.log`"
    assert named_paths(text) == ["services/xds/src/tollgate/xds/translate.py", "bench/allocator.py"]
    assert named_paths("`tests/e2e/test_dev.py::test_x` and `../shared/vendor/tilt/`") == [
        "tests/e2e/test_dev.py",
        "../shared/vendor/tilt/",
    ]
    assert exists("deploy/charts/tollgate-<service>/values.yaml")
    assert not exists("seeds/epic-operator.md")
    assert named_paths("the seed `epic-operator.md`, the page `xds.md`") == ["epic-operator.md", "xds.md"]
    assert exists("xds.md") and not exists("epic-operator.md")
    assert exists("deploy/charts/*/charts"), "vendored by make charts, ignored by git"
    assert (
        slug("Gateway proxies (GWProxy, GWRoute, GWEndpointSlice)") == "gateway-proxies-gwproxy-gwroute-gwendpointslice"
    )


def test_the_readme_links_the_troubleshooting_page() -> None:
    assert "](docs/troubleshooting.md)" in (ROOT / "README.md").read_text()
    headings = [
        line for line in (ROOT / "docs" / "troubleshooting.md").read_text().splitlines() if line.startswith("## ")
    ]
    assert len(headings) == 10, "ten failures, one section each"
