"""The package's own layout: each module imports only modules below it, so no import order
can leave one half-initialised (issue 46: the loader and torch_view imported each other)."""

from __future__ import annotations

import re
from pathlib import Path

import loader_ml


def _edges(package: Path) -> dict[str, set[str]]:
    modules = {f.stem: f for f in package.glob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for line in path.read_text().splitlines():
            for a, b in re.findall(r"^\s*from \.(\w+) import|^\s*from \. import (\w+)", line):
                target = a or b
                if target in modules and target != name:
                    edges[name].add(target)
    return edges


def _in_a_circle(edges: dict[str, set[str]]) -> list[str]:
    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(edges[start])
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(edges[node])
        return False

    return sorted(m for m in edges if reaches(m, m))


def test_the_package_has_no_import_circle() -> None:
    package = Path(loader_ml.__file__).parent
    assert _in_a_circle(_edges(package)) == []


def test_a_circle_is_found() -> None:
    assert _in_a_circle({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a", "b"]
