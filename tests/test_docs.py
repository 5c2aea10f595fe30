"""The docs as written: README.md and every page under docs/.

- Every ```python block runs, unless the line before its fence says why not (`<!-- not run: REASON -->`).
- Every import line they show (`from bertkit... import ...`, `import bertkit...`) imports.
- README.md stays at most 300 lines.
- The docs site builds with `mkdocs build --strict`, and the built site makes no request to another host.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.assets import assets_dir

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 300
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S.*?)\s*-->")
# Pages whose blocks another test runs, comparing each block's output with the one the page shows.
RUN_ELSEWHERE = {
    "docs/understanding-bert.md": "tests/test_explain_tour.py",
    "docs/zh/understanding-bert.md": "tests/test_explain_zh_tour.py",
}
# The import paths users have today, which stay as re-exports whatever moves behind them.
PUBLIC_PATHS = [
    "from bertkit import SentenceTransformer, CrossEncoder, losses, util, models",
    "import bertkit.losses",
    "import bertkit.evaluation",
    "import bertkit.models",
    "import bertkit.cross_encoder",
    "import bertkit.training_args",
    "import bertkit.datasets",
    "import bertkit.model_card",
    "import bertkit.util",
]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _fenced_blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """(line of the fence, language, code, the not-run reason or None) for every fenced block."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        reason = NOT_RUN.search(before)
        body, i = [], i + 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        blocks.append((start + 1, lang, "\n".join(body), reason.group(1) if reason else None))
        i += 1
    return blocks


def _python_blocks() -> list[tuple[str, int, str, str | None]]:
    return [
        (_rel(path), line, code, reason)
        for path in DOC_FILES
        for line, lang, code, reason in _fenced_blocks(path)
        if lang == "python"
    ]


def _to_run() -> list:
    return [
        pytest.param(rel, line, code, id=f"{rel}:{line}")
        for rel, line, code, reason in _python_blocks()
        if reason is None and rel not in RUN_ELSEWHERE
    ]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the pages' `.assets/...` paths resolve to the real assets."""
    assets = assets_dir()
    if not (assets / "minilm" / "config.json").is_file():
        pytest.skip(f"the MiniLM asset is missing from {assets}: run `make assets`")
    work = tmp_path_factory.mktemp("docs-run")
    (work / ".assets").symlink_to(assets, target_is_directory=True)
    return work


def test_blocks_are_found_and_every_skip_says_why():
    blocks = _python_blocks()
    files = {rel for rel, *_ in blocks}
    assert "README.md" in files and "docs/guides/sentence-transformers.md" in files, files
    assert len(_to_run()) >= 5
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"<!--\s*not run\b.*?-->", text):
            assert NOT_RUN.fullmatch(m.group(0)), f"{_rel(path)}: a not-run marker without a reason: {m.group(0)}"
    for rel, runner in RUN_ELSEWHERE.items():
        assert (ROOT / rel).is_file() and (ROOT / runner).is_file(), (rel, runner)


@pytest.mark.parametrize("rel, line, code", _to_run())
def test_python_block_runs(rel: str, line: int, code: str, workdir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(workdir)
    namespace = {"__name__": "__docs__"}
    exec(compile(code, f"{rel}:{line}", "exec"), namespace)  # a page's example runs as a reader runs it


def _imports_in(snippet: str) -> list[tuple[str, list[str]]]:
    """(module, names) of each bertkit import in a block or an inline code span; names empty for `import m`."""
    found = []
    try:
        tree = ast.parse(snippet)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bertkit" and not node.level:
                found.append((node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "bertkit"]
        return found
    for m in re.finditer(r"\bfrom\s+(bertkit(?:\.\w+)*)\s+import\s+([\w\s,()]+)", snippet):
        names = [n.split(" as ")[0].strip(" ()\n") for n in m.group(2).split(",")]
        found.append((m.group(1), [n for n in names if n.isidentifier()]))
    for m in re.finditer(r"(?:^|[\s;])import\s+(bertkit(?:\.\w+)*)", snippet):
        found.append((m.group(1), []))
    return found


def _documented_imports() -> dict[str, list[str]]:
    """Each import statement the README and the pages show, with where it is shown."""
    shown: dict[str, list[str]] = {}
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        snippets = [code for _, lang, code, _ in _fenced_blocks(path) if lang in ("python", "")]
        prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)
        snippets += re.findall(r"`([^`]*\bbertkit\b[^`]*)`", prose)  # inline spans, a line break included
        for snippet in snippets:
            for module, names in _imports_in(snippet):
                stmt = f"from {module} import {', '.join(names)}" if names else f"import {module}"
                shown.setdefault(stmt, []).append(_rel(path))
    return shown


def _check_import(stmt: str) -> str | None:
    """None when the statement imports; else why not."""
    m = re.fullmatch(r"from (\S+) import (.+)|import (\S+)", stmt)
    module_name = m.group(1) or m.group(3)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # an import error of any kind is the finding
        return f"{stmt}: {type(e).__name__}: {e}"
    for name in (m.group(2) or "").split(", ") if m.group(1) else []:
        try:
            getattr(module, name)
            continue
        except AttributeError:
            pass
        try:
            importlib.import_module(f"{module_name}.{name}")
        except Exception as e:
            return f"{stmt}: {name}: {type(e).__name__}: {e}"
    return None


def test_every_documented_import_path_imports():
    shown = _documented_imports()
    assert any(s.startswith("from bertkit import") for s in shown) and len(shown) >= 8, sorted(shown)
    failures = []
    for stmt, where in sorted(shown.items()):
        why = _check_import(stmt)
        if why:
            failures.append(f"{why} (shown in {', '.join(sorted(set(where)))})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("stmt", PUBLIC_PATHS)
def test_public_import_paths_of_today_import(stmt: str):
    assert _check_import(stmt) is None, _check_import(stmt)


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines, over {README_MAX_LINES}: move the detail into docs/"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for tool in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(tool, reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
    r = subprocess.run([*cmd, "--site-dir", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, "mkdocs build --strict failed:\n" + r.stdout[-3000:] + r.stderr[-6000:]
    return out


def test_site_builds_strict(site: Path):
    assert (site / "index.html").is_file()
    assert (site / "api" / "modeling.html").stat().st_size > 10_000  # mkdocstrings rendered the docstrings
    assert (site / "guides" / "sentence-transformers.html").is_file()


# Elements that make the browser fetch what their src/href names, when it names another host.
_FETCHING_TAG = re.compile(
    r"<(?:script|link|img|iframe|source|video|audio|embed|object)\b[^>]*?\b(?:src|href|data)\s*=\s*[\"']?(?:https?:)?//",
    re.I,
)
_CSS_REMOTE = re.compile(r"url\(\s*[\"']?(?:https?:)?//|@import", re.I)


def test_site_makes_no_outside_request(site: Path):
    offending = []
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8", errors="replace")
        offending += [f"{page.relative_to(site)}: {m.group(0)[:120]}" for m in _FETCHING_TAG.finditer(html)]
        if re.search(r"fonts\.(googleapis|gstatic)\.com", html):
            offending.append(f"{page.relative_to(site)}: a Google Fonts reference")
        # material's script fetches mermaid for a diagram and the repository's facts for a repo_url:
        # neither may be on a page
        if 'class="mermaid' in html or 'data-md-component="source"' in html:
            offending.append(f"{page.relative_to(site)}: a mermaid diagram or a repository widget")
    for sheet in site.rglob("*.css"):
        css = sheet.read_text(encoding="utf-8", errors="replace")
        offending += [f"{sheet.relative_to(site)}: {m.group(0)}" for m in _CSS_REMOTE.finditer(css)]
        if "fonts.googleapis" in css:
            offending.append(f"{sheet.relative_to(site)}: a Google Fonts reference")
    assert not offending, "\n".join(offending[:20])
