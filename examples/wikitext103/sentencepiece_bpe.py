"""Train a SentencePiece BPE model on WikiText-103's training split and encode the splits with it.

    python sentencepiece_bpe.py train TRAIN_FILE MODEL_PREFIX VOCAB THREADS
    python sentencepiece_bpe.py encode MODEL THREADS IN_FILE OUT_FILE

WikiText's own ``<unk>`` stays one piece (a user-defined symbol), which fairseq's dictionary maps to
its ``<unk>``; SentencePiece's unknown piece is renamed so that the two do not clash, and byte
fallback spells any character outside the model as UTF-8 bytes, so encoding loses nothing. Encoding
keeps the lines (a blank line stays blank: fairseq-preprocess gives it just ``</s>``, as it does for
the word-level data), so word counts and subword counts cover the same lines.
"""

import os
import sys

import sentencepiece as spm


def train(train_file, prefix, vocab, threads):
    spm.SentencePieceTrainer.train(
        input=train_file,
        model_prefix=prefix,
        vocab_size=int(vocab),
        model_type="bpe",
        character_coverage=0.9999,
        byte_fallback=True,
        user_defined_symbols=["<unk>"],
        unk_piece="<spm_unk>",
        input_sentence_size=2_000_000,  # WikiText-103 has 1.8M lines: all of them
        shuffle_input_sentence=True,
        num_threads=int(threads),
        minloglevel=1,
    )


def encode(model, threads, src, dst):
    sp = spm.SentencePieceProcessor(model_file=model)

    def write(texts):
        for pieces in sp.encode(texts, out_type=str, num_threads=int(threads)):
            fout.write(" ".join(pieces) + "\n")  # a blank line gives no pieces: it stays blank

    with open(src, encoding="utf-8") as fin, open(dst + ".tmp", "w", encoding="utf-8") as fout:
        texts = []
        for line in fin:
            texts.append(line.strip())
            if len(texts) == 10000:
                write(texts)
                texts = []
        write(texts)
    os.replace(dst + ".tmp", dst)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"train": train, "encode": encode}[command](*args)
