"""binarize.sh: word-level and SentencePiece binarization of the WikiText-format fixture, the word
counts that make perplexity per word, idempotence, and a folder without the splits."""

import json
import math
import re

import pytest

from .conftest import BPE_VOCAB, FIXTURE, run_recipe

SPLITS = ("train", "valid", "test")


def fairseq_counts(output):
    """``{file name: tokens}`` from fairseq-preprocess's log."""
    return {name: int(tokens) for name, tokens in re.findall(r"/(wiki\.\w+\.tokens): \d+ sents, (\d+) tokens", output)}


def fixture_words(split):
    lines = (FIXTURE / f"wiki.{split}.tokens").read_text(encoding="utf-8").splitlines()
    return sum(len(line.split()) + 1 for line in lines)  # + one end of line per line, blank ones included


@pytest.mark.e2e
def test_word_level_binarization_counts_every_word_of_every_split(recipe_runs):
    run = recipe_runs.get("data")["binarize"].check()
    data = recipe_runs.dir / "data-bin" / "wikitext-103"
    assert (data / ".done").is_file()
    assert sorted(p.name for p in data.parent.iterdir()) == ["wikitext-103"]  # no staging folder left
    for split in SPLITS:
        assert (data / f"{split}.bin").stat().st_size > 0
    # Every word of the fixture is in the training dictionary (<unk> included): nothing is replaced.
    assert "0.0% replaced" in run.output and "% replaced" not in run.output.replace("0.0% replaced", "")
    tokens = fairseq_counts(run.output)
    words = json.loads((data / "words.json").read_text())
    for split in SPLITS:
        assert tokens[f"wiki.{split}.tokens"] == fixture_words(split)
    for split in ("valid", "test"):
        assert words[split]["words"] == tokens[f"wiki.{split}.tokens"]
    vocabulary = {w for line in (FIXTURE / "wiki.train.tokens").read_text().splitlines() for w in line.split()}
    entries = [line.split()[0] for line in (data / "dict.txt").read_text().splitlines()]
    # fairseq pads the dictionary to a multiple of 8 with unused "madeupword" entries.
    assert {w for w in entries if not w.startswith("madeupword")} == vocabulary - {"<unk>"}


@pytest.mark.e2e
def test_rerun_is_skipped_when_done(recipe_runs):
    recipe_runs.get("data")["binarize"].check()
    before = (recipe_runs.dir / "data-bin" / "wikitext-103" / "train.bin").stat().st_mtime_ns
    run = recipe_runs.run("binarize.sh").check()
    assert "already binarized" in run.output and "FORCE=1 redoes it" in run.output
    assert (recipe_runs.dir / "data-bin" / "wikitext-103" / "train.bin").stat().st_mtime_ns == before


@pytest.mark.e2e
def test_sentencepiece_binarization_and_perplexity_per_word(recipe_runs):
    runs = recipe_runs.get("bpe")
    binarize = runs["binarize"].check()
    data = recipe_runs.dir / "data-bin" / f"wikitext-103-spm{BPE_VOCAB}"
    assert (data / "spm.model").is_file() and (data / ".done").is_file()
    assert not (data / "text").exists()  # the encoded text is not kept
    pieces = fairseq_counts(binarize.output)
    for split in SPLITS:  # subwords: more tokens than words, on the same lines
        assert pieces[f"wiki.{split}.tokens"] > 1.5 * fixture_words(split)
    assert "0.0% replaced" in binarize.output
    runs["train"].check()
    runs["eval"].check()
    report = json.loads((recipe_runs.dir / "results" / "bpe" / "eval.json").read_text())
    assert report["unit"] == "SentencePiece"
    row = next(r for r in report["rows"] if r["kind"] == "standard" and r["split"] == "test")
    assert row["status"] == "ok"
    assert row["tokens"] == pieces["wiki.test.tokens"]  # every subword scored
    assert row["words"] == fixture_words("test")
    # ppl per word = exp(total NLL / words), the total NLL being loss (bits per token) x tokens x ln 2.
    total_nll = row["loss_base2"] * math.log(2) * row["tokens"]
    assert row["ppl_word"] == pytest.approx(math.exp(total_nll / row["words"]), rel=1e-9)
    assert row["ppl_word"] == pytest.approx(row["ppl_token"] ** (row["tokens"] / row["words"]), rel=1e-9)
    assert row["ppl_word"] > row["ppl_token"] > 1


@pytest.mark.e2e
def test_srcdict_encodes_with_the_given_dictionary_in_its_order(recipe_runs, tmp_path):
    """SRCDICT (for a released model, whose embeddings follow its own dictionary): the data-bin folder keeps that
    dictionary, order included, and the splits are encoded with it (here the session's dictionary reversed)."""
    from fairseq.data import Dictionary, data_utils

    recipe_runs.get("data")["binarize"].check()
    own = (recipe_runs.dir / "data-bin" / "wikitext-103" / "dict.txt").read_text().splitlines()
    srcdict = tmp_path / "dict.txt"
    srcdict.write_text("\n".join(reversed(own)) + "\n")
    data = tmp_path / "data-bin"
    run = recipe_runs.run("binarize.sh", WORKERS=1, SRCDICT=srcdict, DATA_BIN=data).check()
    assert f"SRCDICT={srcdict}" in run.output and "0.0% replaced" in run.output
    assert (data / "dict.txt").read_text() == srcdict.read_text()
    dictionary = Dictionary.load(str(data / "dict.txt"))
    test = data_utils.load_indexed_dataset(str(data / "test"), dictionary)
    lines = (FIXTURE / "wiki.test.tokens").read_text(encoding="utf-8").splitlines()
    for i in (0, 1, len(lines) - 1):
        assert dictionary.string(test[i]) == " ".join(lines[i].split())


def test_folder_without_the_splits_fails_naming_the_file_and_writes_nothing(tmp_path, outside):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "wiki.train.tokens").write_bytes((FIXTURE / "wiki.train.tokens").read_bytes())
    run = run_recipe("binarize.sh", outside, "wt103", RAW_DIR=raw)
    assert run.returncode != 0
    assert f"binarize.sh: error: missing {raw}/wiki.valid.tokens" in run.output
    assert not (outside / "wt103").exists()


def test_unknown_bpe_is_refused(outside):
    run = run_recipe("binarize.sh", outside, "wt103", BPE="wordpiece")
    assert run.returncode != 0
    assert "BPE must be none or sentencepiece, got BPE=wordpiece" in run.output
