"""The docs hold what they show: every code block of the README and the guides is checked
(Rust compiled as doc tests, Python compiled and its `loader_ml` calls checked against the
package, shell commands' paths checked) or marked illustrative (```text); every test a
table names is in the file it names; every link between the pages resolves."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import loader_ml

WORKSPACE = Path(__file__).resolve().parents[3]
PAGES = sorted([WORKSPACE / "README.md", WORKSPACE / "CONTRIBUTING.md",
                WORKSPACE / "CHANGELOG.md", WORKSPACE / "crates/python/README.md",
                *(WORKSPACE / "docs").glob("*.md")])
#: Info strings of blocks that are shown, not run: command output, file layouts.
ILLUSTRATIVE = {"text"}
FENCE = re.compile(r"^\s*```(.*)$")


def blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line, info string, code) of every fenced block of a page."""
    found, info, start, lines = [], None, 0, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence and info is None:
            info, start, lines = fence.group(1).strip(), number, []
        elif fence:
            found.append((start, info, "\n".join(lines)))
            info = None
        elif info is not None:
            lines.append(line)
    assert info is None, f"{page}: the block at line {start} is not closed"
    return found


def doctested() -> set[str]:
    """The pages whose Rust blocks `loader-core` compiles as doc tests."""
    lib = (WORKSPACE / "crates/core/src/lib.rs").read_text()
    return set(re.findall(r'include_str!\("\.\./\.\./\.\./([^"]+)"\)', lib))


def calls_of(tree: ast.AST, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "loader_ml"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(WORKSPACE)))
def test_every_code_block_is_checked_or_marked_illustrative(page: Path) -> None:
    compiled = doctested()
    for line, info, code in blocks(page):
        where = f"{page.relative_to(WORKSPACE)}:{line}"
        language = info.split(",")[0]
        if language == "rust":
            assert str(page.relative_to(WORKSPACE)) in compiled or "ignore" in info, \
                f"{where}: a Rust block on a page no doc test includes"
        elif language == "python":
            tree = ast.parse(code, filename=where)
            compile(tree, where, "exec")
            for attribute in {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                              and isinstance(n.value, ast.Name) and n.value.id == "loader_ml"}:
                assert hasattr(loader_ml, attribute), f"{where}: loader_ml.{attribute}"
            for name in ("DataLoader", "Dataset"):
                accepted = inspect.signature(getattr(loader_ml, name)).parameters
                for call in calls_of(tree, name):
                    for keyword in call.keywords:
                        assert keyword.arg is None or keyword.arg in accepted, \
                            f"{where}: loader_ml.{name}(..., {keyword.arg}=...)"
        elif language == "sh":
            for path in re.findall(r"(?<![\w/.-])((?:\.ci|crates|benches|examples|docs)/[\w./-]+)", code):
                assert (WORKSPACE / path.rstrip(".")).exists() or "*" in path, \
                    f"{where}: {path} does not exist"
        else:
            assert language in ILLUSTRATIVE, \
                f"{where}: a block of {info!r}: give it a checked language or mark it ```text"


def sources() -> list[Path]:
    """The files a page may name a test in."""
    return [p for pattern in ("crates/**/*.rs", "crates/**/*.py", "examples/**/*.rs")
            for p in WORKSPACE.glob(pattern) if "target" not in p.parts]


def named_files(token: str, files: list[Path]) -> list[Path]:
    """The files a page's `path` stands for: those whose path ends with it (a file), or lie
    under it (a folder), beneath `crates/`, the Python tests or the workspace."""
    token = token.rstrip("/")
    return [f for f in files
            if str(f).endswith("/" + token) or f"/{token}/" in str(f)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(WORKSPACE)))
def test_every_test_a_page_names_is_in_the_file_it_names(page: Path) -> None:
    """A test named after a file in a table (`` `file.rs` `test_name` ``) is defined in that
    file; one named alone in the reliability page's tables, somewhere. A name with `*` stands
    for several. (Other tables name option values and settings, not tests.)"""
    files = sources()
    definitions = {f: set(re.findall(r"(?:fn|def) ([a-z0-9_]+)", f.read_text())) for f in files}
    anywhere = set().union(*definitions.values())
    name = re.compile(r"^[a-z*][a-z0-9_*]*_[a-z0-9_*]*_[a-z0-9_*]+$")
    path = re.compile(r"^(?:[\w.-]+/)*[\w-]+(?:\.(?:rs|py)|/)$|^(?:[\w.-]+/)+[\w-]+$")
    for line in page.read_text().splitlines():
        if not line.startswith("|"):
            continue  # prose names settings and functions too; a table row names its tests
        # The first column says what is claimed (it may name settings); the rest name tests.
        for cell in line.split("|")[2:]:
            current: list[Path] | None = None
            for token in re.findall(r"`([^`]+)`", cell):
                if path.match(token) and ("/" in token or token.endswith((".rs", ".py"))):
                    current = named_files(token, files) or None
                    assert current or not token.endswith((".rs", ".py")), \
                        f"{page.name}: no file {token}"
                elif name.match(token) and (current or page.name == "reliability.md"):
                    pattern = re.compile("^" + token.replace("*", ".*") + "$")
                    pool = (set().union(*(definitions[f] for f in current)) if current
                            else anywhere)
                    assert any(pattern.match(d) for d in pool), \
                        f"{page.name}: {token} is not in {[str(f) for f in current or []] or 'any file'}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(WORKSPACE)))
def test_every_link_between_pages_resolves(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.relative_to(WORKSPACE)}: {target}"
