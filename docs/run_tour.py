"""Run a Markdown document's code blocks and check that their printed output is what the document shows.

    python docs/run_tour.py [docs/understanding-bert.md] [--update] [--workdir DIR]

* A ```python block runs in one namespace shared by the whole document; when the next block is
  ```text, that block is the output the code must print.
* A ```console block holds ``$ command`` lines followed by their output (stdout and stderr).
  ``bertkit ...`` runs this checkout's bertkit with the current Python.
* In an expected output a line ``...`` stands for any number of lines.
* Numbers are compared with a stated tolerance, never character for character, because matmul
  kernels differ between CPUs (AMX tiles, AVX-512 BF16, plain AVX2) and so do float sums and the bf16
  training steps built on them:
  - integers (token ids, counts, shapes) are exact;
  - a percentage (a number followed by ``%``) may differ by 2 points: it is a rate over a few hundred
    examples from a model trained on this CPU, where one more sentence right is 0.25 points;
  - other decimals may differ by a relative 1e-3, or by 1.5 units of their last printed digit,
    whichever is larger;
  - numbers in e-notation at or below 1e-5 (the rounding noise that ``--verify`` prints) match any
    other such number.

Everything runs in ``--workdir`` (default: a fresh temporary folder) with ``.assets`` linked to
``$BERTKIT_ASSETS``, so the commands read as they would from the repository root. ``--update``
rewrites the expected outputs from this run. Exit status 1 when an output drifted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?")
RELATIVE = 1e-3  # on decimals: float sums in another order, bf16 steps on another kernel
LAST_DIGITS = 1.5  # ... or this many units of the last printed digit, whichever is larger
PERCENT_POINTS = 2.0  # on percentages: a rate over a few hundred examples after training on this CPU


def blocks(text: str) -> list[tuple[str, str, int, int]]:
    """(language, body, start, end) of each fenced block."""
    return [(m.group(1), m.group(2), m.start(2), m.end(2)) for m in FENCE.finditer(text)]


def _numbers_match(a: str, b: str) -> bool:
    """Whether two printed numbers agree within the tolerances stated in the module docstring."""
    if a == b:
        return True
    if a.endswith("%") != b.endswith("%"):
        return False
    if a.endswith("%"):
        return abs(float(a[:-1]) - float(b[:-1])) <= PERCENT_POINTS
    fa, fb = float(a), float(b)
    if "e" in a or "e" in b:
        return (abs(fa) <= 1e-5 and abs(fb) <= 1e-5) or abs(fa - fb) <= RELATIVE * max(abs(fa), abs(fb))
    if "." not in a and "." not in b:
        return False  # integers: ids, counts and shapes are exact
    decimals = max(len(a.partition(".")[2]), len(b.partition(".")[2]))
    return abs(fa - fb) <= max(RELATIVE * max(abs(fa), abs(fb)), LAST_DIGITS * 10**-decimals)


def _line_matches(expected: str, actual: str) -> bool:
    if NUMBER.sub("#", expected) != NUMBER.sub("#", actual):
        return False
    return all(_numbers_match(a, b) for a, b in zip(NUMBER.findall(expected), NUMBER.findall(actual)))


def output_matches(expected: str, actual: str) -> bool:
    """Line by line, with ``...`` lines matching any run of lines."""
    exp = expected.rstrip("\n").split("\n")
    act = actual.rstrip("\n").split("\n")

    def match(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(match(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and _line_matches(exp[i], act[j]) and match(i + 1, j + 1)

    return match(0, 0)


def keep_shape(expected: str, actual: str) -> str:
    """For --update: the new output, cut to the old block's head/tail around a ``...`` line."""
    exp = expected.rstrip("\n").split("\n")
    if "..." not in exp:
        return actual
    k = exp.index("...")
    act = actual.rstrip("\n").split("\n")
    tail = len(exp) - k - 1
    return "\n".join(act[:k] + ["..."] + (act[-tail:] if tail else [])) + "\n"


def run_console(body: str, workdir: Path, env: dict[str, str]) -> str:
    out = []
    for line in body.splitlines():
        if not line.startswith("$ "):
            continue
        argv = shlex.split(line[2:])
        if argv[0] == "bertkit":
            argv = [sys.executable, "-m", "bertkit", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        r = subprocess.run(
            argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
        )
        out.append(line + "\n" + r.stdout)
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("doc", nargs="?", default=str(ROOT / "docs" / "understanding-bert.md"))
    ap.add_argument("--update", action="store_true", help="rewrite the expected outputs from this run")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    doc = Path(args.doc)
    text = doc.read_text(encoding="utf-8")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tour-"))
    workdir.mkdir(parents=True, exist_ok=True)
    assets = os.environ.get("BERTKIT_ASSETS", str(ROOT / ".assets"))
    link = workdir / ".assets"
    if not link.exists():
        link.symlink_to(Path(assets).resolve(), target_is_directory=True)
    env = {
        **os.environ,
        "BERTKIT_ASSETS": assets,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    os.environ["BERTKIT_ASSETS"] = assets
    sys.path.insert(0, str(ROOT / "src"))
    namespace: dict[str, object] = {"__name__": "__tour__"}
    found = blocks(text)
    replacements: list[tuple[int, int, str]] = []
    failures = 0
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for n, (lang, body, start, end) in enumerate(found):
            if lang == "python":
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    exec(compile(body, f"{doc.name} block {n}", "exec"), namespace)  # noqa: S102 - the doc's own code
                nxt = found[n + 1] if n + 1 < len(found) else None
                if nxt is None or nxt[0] != "text":
                    if buf.getvalue().strip():
                        print(f"block {n}: prints output but the document shows none", file=sys.stderr)
                        failures += 1
                    continue
                actual, (_, expected, s2, e2) = buf.getvalue(), nxt
            elif lang == "console":
                actual, expected, s2, e2 = run_console(body, workdir, env), body, start, end
            else:
                continue
            if not output_matches(expected, actual):
                failures += 1
                print(
                    f"--- {doc.name} block {n} ({lang}): output drifted\n--- expected:\n{expected}--- got:\n{actual}",
                    file=sys.stderr,
                )
            replacements.append((s2, e2, keep_shape(expected, actual)))
    finally:
        os.chdir(cwd)
    if args.update:
        for s, e, new in sorted(replacements, reverse=True):
            text = text[:s] + (new if new.endswith("\n") else new + "\n") + text[e:]
        from bertkit._io import atomic_write_text

        atomic_write_text(doc, text)
        print(f"updated {doc}")
        return 0
    print(f"{len(replacements)} outputs checked, {failures} drifted")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
