"""Writes ``urpe_with_optimizer.pt``, the old-layout checkpoint with optimizer state that
tests/models/test_checkpoint_upgrade.py resumes.

Run once, at commit 4bfcdfd (the last layout that stored the shared ``b``/``c`` under every layer's
``self_attn`` and kept the optimizer's moments in that layout's parameter order), from the repository
root: ``.venv/bin/python -m tests.models.legacy.make_resume_checkpoint``. The URPE arch trains 2 updates
with Adam on the 40 lines and dictionary of ``make_legacy_checkpoints.py`` through the real ``fairseq-train``.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SIZES = ["--decoder-layers", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2"]


def tool(name):
    return [str(Path(sys.executable).parent / f"fairseq-{name}")]


def main():
    work = Path(tempfile.mkdtemp())
    lines = (REPO / "data" / "brown" / "train.txt").read_text().splitlines()[:40]
    (work / "train.txt").write_text("\n".join(lines) + "\n")
    subprocess.run(
        tool("preprocess") + ["--only-source", "--trainpref", work / "train.txt", "--validpref", work / "train.txt",
                              "--destdir", work / "bin", "--srcdict", HERE / "dict.txt", "--workers", "1"],
        check=True,
    )
    subprocess.run(
        tool("train") + [work / "bin", "--user-dir", REPO / "fairseq_urpe", "--task", "language_modeling",
                         "--arch", "transformer_lm_urpe", *SIZES, "--tokens-per-sample", "8", "--batch-size", "4",
                         "--max-update", "2", "--optimizer", "adam", "--lr", "0.01", "--cpu", "--seed", "3",
                         "--save-dir", work / "save", "--no-epoch-checkpoints", "--disable-validation"],
        check=True,
    )
    shutil.copy(work / "save" / "checkpoint_last.pt", HERE / "urpe_with_optimizer.pt")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
