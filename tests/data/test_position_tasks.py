import numpy as np
import pytest

from fairseq_urpe.data.position_tasks import FILLER, etp_targets, pi_targets, position_example

F = FILLER


def test_etp_even_length_takes_odd_positions_then_filler():
    tokens = np.array([5, 6, 7, 8, 9, 10])
    assert etp_targets(tokens).tolist() == [6, 8, 10, F, F, F]


def test_etp_odd_length_last_first_half_position_has_no_2i_plus_1_and_gets_filler():
    # n = 5: i < 2.5 is 0, 1, 2 but x_{2*2+1} = x_5 does not exist
    assert etp_targets(np.array([1, 2, 3, 4, 5])).tolist() == [2, 4, F, F, F]


def test_etp_applies_per_row_of_a_batch():
    tokens = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert etp_targets(tokens).tolist() == [[1, 3, F, F], [5, 7, F, F]]


def test_pi_target_is_the_position():
    assert pi_targets(np.array([[9, 9, 9], [1, 2, 3]])).tolist() == [[0, 1, 2], [0, 1, 2]]


@pytest.mark.parametrize("task", ["etp", "pi"])
def test_examples_are_deterministic_per_seed_split_and_index(task):
    a = position_example(task, 50, 16, seed=3, split="train", index=7)
    b = position_example(task, 50, 16, seed=3, split="train", index=7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    for other in (dict(seed=4, split="train", index=7), dict(seed=3, split="valid", index=7),
                  dict(seed=3, split="train", index=8)):
        assert not np.array_equal(a[0], position_example(task, 50, 16, **other)[0])


@pytest.mark.parametrize("task, rule", [("etp", etp_targets), ("pi", pi_targets)])
def test_examples_hold_in_range_tokens_and_their_task_targets(task, rule):
    tokens, targets = position_example(task, 7, 12, seed=0, split="train", index=0)
    assert tokens.shape == targets.shape == (12,)
    assert tokens.min() >= 0 and tokens.max() < 7
    assert np.array_equal(targets, rule(tokens))


def test_unknown_task_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="--synthetic-task"):
        position_example("copy", 5, 4, 0, "train", 0)
