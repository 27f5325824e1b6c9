"""Count the words of WikiText-103 split files, as perplexity per word needs them.

    python count_words.py OUT.json NAME=PATH [NAME=PATH ...]

A word is what fairseq's word-level dictionary makes a token: each whitespace-separated item of a line
(fairseq.tokenizer.tokenize_line, ``<unk>`` included) plus one end-of-line symbol per line, blank lines
included (fairseq-preprocess encodes every line with a final ``</s>``). So for the word-level model the
count equals the tokens fairseq-eval-lm scores, and for a subword model
``ppl_word = exp(total NLL of the split / words)`` is on the same scale as the word-level perplexity.
Writes ``{NAME: {"words": N, "lines": L}}`` to OUT.json (atomically). Needs only the standard library.
"""

import json
import os
import re
import sys

SPACE = re.compile(r"\s+")  # fairseq.tokenizer.SPACE_NORMALIZER


def count(path):
    words = lines = 0
    with open(path, encoding="utf-8") as f:  # text mode: the same line breaks as fairseq's readline()
        for line in f:
            words += len(SPACE.sub(" ", line).strip().split())
            lines += 1
    return {"words": words + lines, "lines": lines}


def main(out, *pairs):
    counts = {}
    for pair in pairs:
        name, _, path = pair.partition("=")
        counts[name] = count(path)
    with open(out + ".tmp", "w") as f:
        json.dump(counts, f, indent=1)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(*sys.argv[1:])
