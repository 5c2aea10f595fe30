"""The house's shape, checked by `make lint` beside import-linter's layers (run from the repo root).

- no circle of imports among bertkit's modules, package faces (``__init__``) included, counting every
  import statement (function-local ones too; only ``if TYPE_CHECKING:`` blocks are left out);
- no public class name defined twice under ``src/bertkit`` (except the cross-encoder losses that share
  a name with a bi-encoder loss, as in sentence-transformers: one class each, in its own package);
- no source file over 1,000 lines (the generated Unicode table aside), and no function over 100;
- the Trainer's loop file at most 800 lines, and README.md at most 300.

It prints one line per breach and exits 1 when there is any; ``--counts`` prints the figures as well.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path("src")
PACKAGE = "bertkit"
MAX_FILE, MAX_FUNCTION, MAX_LOOP_FILE, MAX_README = 1000, 100, 800, 300
GENERATED = {"src/bertkit/tokenization/_unicode_data.py"}
LOOP_FILE = "src/bertkit/training/trainer.py"
# sentence-transformers' own twins: a cross-encoder loss and a bi-encoder loss of one name, each in its package
SHARED_NAMES = {
    "CachedMultipleNegativesRankingLoss": {"bertkit.sentence.losses", "bertkit.sentence.cross_encoder.losses"},
    "MSELoss": {"bertkit.sentence.losses", "bertkit.sentence.cross_encoder.losses"},
    "MarginMSELoss": {"bertkit.sentence.losses", "bertkit.sentence.cross_encoder.losses"},
    "MultipleNegativesRankingLoss": {"bertkit.sentence.losses", "bertkit.sentence.cross_encoder.losses"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1 if node.level else 0):
            base = base.rpartition(".")[0]
        target = (base + ("." + node.module if node.module else "")) if node.level else (node.module or "")
        names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
    out = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def import_graph() -> tuple[dict[str, set[str]], int]:
    """Every bertkit module's bertkit imports, and how many import statements sit inside functions."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    known, graph, local = set(files), {}, 0
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[module] = set()
        for node in _imports(tree):
            graph[module] |= _targets(module, path.name == "__init__.py", node, known)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and _targets(
                        module, path.name == "__init__.py", node, known
                    ):
                        local += 1
    return graph, local


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Circles among bertkit's top-level packages and modules."""
    top: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        a = ".".join(module.split(".")[:2])
        top[a]
        for t in targets:
            b = ".".join(t.split(".")[:2])
            if a != b and PACKAGE not in (a, b):
                top[a].add(b)
    return circles(top)


def _package_of(module: str, packages: set[str]) -> str | None:
    """The one of ``packages`` that ``module`` is, or lies in (the longest such), else None."""
    inside = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(inside, key=len) if inside else None


def twin_classes() -> dict[str, list[str]]:
    """Public class names defined in more than one module."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in SRC.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(_module_name(path))
    twins = {}
    for name, modules in where.items():
        if len(modules) < 2:
            continue
        allowed = SHARED_NAMES.get(name)
        if allowed and len(modules) == 2 and {_package_of(m, allowed) for m in modules} == allowed:
            continue
        twins[name] = sorted(modules)
    return twins


def oversized() -> tuple[list[str], list[str]]:
    """Files over their line limit, and functions over theirs."""
    files, functions = [], []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        limit = MAX_LOOP_FILE if path.as_posix() == LOOP_FILE else MAX_FILE
        if lines > limit and path.as_posix() not in GENERATED:
            files.append(f"{path}: {lines} lines (at most {limit})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    functions.append(f"{path}:{node.lineno}: {node.name} is {n} lines (at most {MAX_FUNCTION})")
    return files, functions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", action="store_true", help="print the figures too")
    args = parser.parse_args(argv)
    graph, local = import_graph()
    module_circles, top_circles = circles(graph), package_circles(graph)
    twins = twin_classes()
    files, functions = oversized()
    readme = Path("README.md").read_text(encoding="utf-8").count("\n") if Path("README.md").is_file() else 0
    breaches = [f"package circle: {' <-> '.join(c)}" for c in top_circles]
    breaches += [f"module circle: {' <-> '.join(c)}" for c in module_circles]
    breaches += [f"class {name} is defined in {', '.join(m)}" for name, m in sorted(twins.items())]
    breaches += files + functions
    if readme > MAX_README:
        breaches.append(f"README.md: {readme} lines (at most {MAX_README}); guides belong in docs/")
    if args.counts:
        print(
            f"{len(graph)} modules; {len(top_circles)} package circles, {len(module_circles)} module circles; "
            f"{local} function-local imports into bertkit; {len(twins)} public class names defined twice; "
            f"{len(files)} files and {len(functions)} functions over the limits; README.md {readme} lines"
        )
    for line in breaches:
        print(line, file=sys.stderr)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
