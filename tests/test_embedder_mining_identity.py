"""`train-embedder --hard-negatives K --mine-from INDEX_DIR`: the index folder's content is part of the
run's identity, so `--resume` after the index changed is refused with one line naming it (real MiniLM,
real BBC sentences, a real `bertkit index`)."""

import json
import re

from bertkit.assets import asset_path
from bertkit.cli import main

MINILM = str(asset_path("minilm"))


def _sentences(n: int, skip: int = 0) -> list[str]:
    out: list[str] = []
    for line in open(asset_path("bbcnews-train"), encoding="utf-8"):
        out += [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if 20 < len(x) < 200]
        if len(out) >= skip + n:
            return out[skip : skip + n]
    raise AssertionError("not enough BBC sentences")


def test_resume_with_a_changed_mining_index_is_refused(tmp_path, capsys):
    s = _sentences(40)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"anchor": s[i], "positive": s[i + 1]}) + "\n" for i in range(0, 16, 2)))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(s[16:40]) + "\n")
    index = tmp_path / "idx"
    assert main(["index", "--model", MINILM, "--input", str(corpus), "--output", str(index)]) == 0
    out = tmp_path / "run"
    cmd = ["train-embedder", "--model", MINILM, "--train", str(train), "--output", str(out), "--hard-negatives", "1"]
    cmd += ["--mine-from", str(index), "--batch-size", "4", "--max-length", "32", "--max-steps", "2"]
    cmd += ["--save-every", "1", "--no-progress"]
    assert main(cmd) == 0
    assert main([*cmd, "--resume"]) == 0  # the same index: the same run
    capsys.readouterr()

    corpus.write_text("\n".join(s[16:40] + _sentences(5, skip=60)) + "\n")  # five more lines, new ids
    assert (
        main(
            ["index", "--model", MINILM, "--input", str(corpus), "--output", str(index), "--append", "--device", "cpu"]
        )
        == 0
    )
    assert json.loads((index / "meta.json").read_text())["count"] == 29
    capsys.readouterr()
    assert main([*cmd, "--resume"]) == 1
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("bertkit ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "holds a different run" in lines[0] and "mine_from_index: was" in lines[0], lines[0]
