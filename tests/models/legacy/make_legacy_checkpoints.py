"""Writes the pre-family checkpoints that tests/models/test_checkpoint_compatibility.py loads.

Run once, at commit c42afd5 (before `--rpe-kind`, `--rpe-slopes` and `--dot-product-free` existed),
from the repository root: ``.venv/bin/python tests/models/legacy/make_legacy_checkpoints.py``.
Each arch trains 3 updates on 40 lines of data/brown through the real ``fairseq-train`` (so the saved
config is exactly what fairseq wrote then) without optimizer state; ``expected.pt`` holds each model's
log-probabilities on a fixed input, computed by that code.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from fairseq import checkpoint_utils

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
ARCHS = {
    "rpe": ["--arch", "transformer_lm_rpe"],
    "urpe_bucketed": ["--arch", "transformer_lm_urpe"],
    "urpe_unique": ["--arch", "transformer_lm_urpe", "--urpe-toeplitz", "unique", "--rpe-per-layer"],
}
SIZES = ["--decoder-layers", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2"]
INPUT = [[5, 9, 4, 17, 2, 30, 11, 7, 12, 3, 8, 6]]  # fixed token ids, longer than --tokens-per-sample


def tool(name):
    return [str(Path(sys.executable).parent / f"fairseq-{name}")]


def main():
    from argparse import Namespace

    from fairseq import utils

    utils.import_user_module(Namespace(user_dir=str(REPO / "fairseq_urpe")))
    work = Path(tempfile.mkdtemp())
    lines = (REPO / "data" / "brown" / "train.txt").read_text().splitlines()[:40]
    (work / "train.txt").write_text("\n".join(lines) + "\n")
    subprocess.run(
        tool("preprocess") + ["--only-source", "--trainpref", work / "train.txt", "--validpref", work / "train.txt",
                              "--destdir", work / "bin", "--nwordssrc", "36", "--workers", "1"],
        check=True,
    )
    shutil.copy(work / "bin" / "dict.txt", HERE / "dict.txt")
    expected = {}
    for name, flags in ARCHS.items():
        save = work / name
        subprocess.run(
            tool("train") + [work / "bin", "--user-dir", REPO / "fairseq_urpe", "--task", "language_modeling", *flags,
                             *SIZES, "--tokens-per-sample", "8", "--batch-size", "4", "--max-update", "3",
                             "--optimizer", "adam", "--lr", "0.01", "--cpu", "--seed", "3", "--save-dir", save,
                             "--no-save-optimizer-state", "--no-epoch-checkpoints", "--disable-validation"],
            check=True,
        )
        shutil.copy(save / "checkpoint_last.pt", HERE / f"{name}.pt")
        models, _ = checkpoint_utils.load_model_ensemble(
            [str(HERE / f"{name}.pt")], arg_overrides={"data": str(HERE)}
        )
        model = models[0].eval()
        with torch.no_grad():
            logits, _ = model(torch.tensor(INPUT))
            expected[name] = model.get_normalized_probs((logits, None), log_probs=True)
    torch.save({"input": torch.tensor(INPUT), "log_probs": expected}, HERE / "expected.pt")
    shutil.rmtree(work)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
