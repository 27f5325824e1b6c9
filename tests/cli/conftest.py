"""Fixtures for the end-to-end tests: a runner for fairseq's real command-line tools and a small,
binarized slice of the Brown corpus that every test shares.

Nothing here is mocked: every tool runs as its own process, forked from a process of the interpreter
running pytest that has imported the tool's console-script module once (``tests/forked_tools.py``).
"""

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Hashable, Optional

import pytest

from fairseq_urpe.fairseq_runs import Run, fairseq_env
from tests.forked_tools import ForkedTools

REPO = Path(__file__).resolve().parents[2]
BROWN = REPO / "data" / "brown"

# (source file, first line, end line) of each split written for the tests. "resume" is a 60-sentence
# split small enough to be one batch (test 2): binarized as a second --validpref (fairseq's "valid1")
# and renamed, since fairseq-train refuses to run beside an unused valid1 ("Valid paths ['valid1'] will
# be ignored") unless every run passes --ignore-unused-valid-subsets.
SLICES = {
    "train": ("train.txt", 0, 1500),
    "valid": ("valid.txt", 0, 200),
    "test": ("test.txt", 0, 200),
    "resume": ("train.txt", 1500, 1560),
}
THRESHOLD = 2  # --thresholdsrc: words seen once in the slice become <unk> (2.7k types instead of 6.5k)
SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")


class FairseqCli:
    """Runs ``fairseq-<tool>`` of the running interpreter's environment in ``workdir``, each command a
    process of its own forked after the tool's imports (:class:`tests.forked_tools.ForkedTools`).

    Every process gets ``OMP_NUM_THREADS=1``: the suite runs two of them at a time on two cores, where
    more threads per process make torch many times slower (a tiny training took 40 s instead of 5.5 s
    with 2 threads on a busy 2-core machine), and the determinism check of test 2 needs the same
    single-threaded kernels in every run.
    """

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.env = fairseq_env(threads=1)
        self.tools = ForkedTools(self.env)

    def run(self, tool: str, *args, input: Optional[str] = None, timeout: float = 300) -> Run:
        return self.tools.run(tool, args, env=self.env, cwd=self.workdir, input=input, timeout=timeout)

    def run_many(self, jobs: Dict[Hashable, tuple], slots: int = 2) -> Dict[Hashable, Run]:
        """Run ``{key: (tool, args[, run_kwargs])}`` with at most ``slots`` processes at once."""
        with ThreadPoolExecutor(max_workers=slots) as pool:
            futures = {
                key: pool.submit(self.run, job[0], *job[1], **(job[2] if len(job) > 2 else {}))
                for key, job in jobs.items()
            }
            return {key: future.result() for key, future in futures.items()}


@dataclass
class BrownData:
    root: Path  # the text slices
    bin: Path  # fairseq-preprocess output (dict.txt, splits train, valid, resume, test)
    vocab_size: int  # dictionary size including the 4 special symbols (what the softmax covers)
    tokens: Dict[str, int] = field(default_factory=dict)  # split -> tokens incl. one </s> per line
    words: frozenset = frozenset()  # the non-special dictionary entries

    @property
    def uniform_ppl(self) -> float:
        """Perplexity of the uniform distribution over the vocabulary: any trained model must beat it."""
        return float(self.vocab_size)


@pytest.fixture(scope="session")
def cli(tmp_path_factory) -> FairseqCli:
    tools = FairseqCli(tmp_path_factory.mktemp("cwd"))
    yield tools
    tools.tools.close()


@pytest.fixture(scope="session")
def brown_data(tmp_path_factory, cli) -> BrownData:
    """Write the slices of data/brown to a temporary folder and binarize them once."""
    root = tmp_path_factory.mktemp("brown")
    paths = {}
    for split, (name, start, end) in SLICES.items():
        lines = (BROWN / name).read_text(encoding="utf-8").splitlines()[start:end]
        assert len(lines) == end - start, f"data/brown/{name} is shorter than the slice {start}:{end}"
        paths[split] = root / f"{split}.txt"
        paths[split].write_text("\n".join(lines) + "\n", encoding="utf-8")
    bin_dir = root / "bin"
    result = cli.run(
        "preprocess",
        "--only-source",
        "--trainpref", paths["train"],
        "--validpref", f"{paths['valid']},{paths['resume']}",
        "--testpref", paths["test"],
        "--destdir", bin_dir,
        "--thresholdsrc", THRESHOLD,
        "--workers", 1,
    ).check()

    vocab = {int(n) for n in re.findall(r"Dictionary: (\d+) types", result.output)}
    assert len(vocab) == 1, result.tail()
    words = [line.split()[0] for line in (bin_dir / "dict.txt").read_text(encoding="utf-8").splitlines()]
    vocab_size = vocab.pop()
    assert vocab_size == len(words) + len(SPECIAL_SYMBOLS)

    for suffix in (".bin", ".idx"):
        (bin_dir / f"valid1{suffix}").rename(bin_dir / f"resume{suffix}")
    tokens = {}
    for split, path in paths.items():
        match = re.search(re.escape(str(path)) + r": (\d+) sents, (\d+) tokens", result.output)
        assert match, f"no token count for {path} in:\n{result.tail()}"
        tokens[split] = int(match.group(2))
        assert (bin_dir / f"{split}.bin").is_file(), f"fairseq-preprocess did not write split {split}"
    return BrownData(root=root, bin=bin_dir, vocab_size=vocab_size, tokens=tokens, words=frozenset(words))


@pytest.fixture(scope="session")
def trainings(cli, brown_data, tmp_path_factory):
    """Every fairseq-train run the end-to-end tests read (lm_runs.Trainings), started once, in the background."""
    from tests.cli.lm_runs import Trainings

    runs = Trainings(cli, brown_data, tmp_path_factory.mktemp("train"))
    yield runs
    runs.close()


@pytest.fixture
def one_torch_thread():
    """In-process model runs with one thread, like the subprocesses (two threads on two busy cores
    can make torch many times slower)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
