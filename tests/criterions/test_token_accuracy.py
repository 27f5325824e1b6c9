"""Accuracy on constructed predictions: through ``count_correct`` and through the criterion and fairseq's
metrics aggregation (what ``fairseq-train`` logs)."""

import pytest
import torch
from fairseq import metrics

from fairseq_urpe.criterions.token_accuracy import TokenAccuracyCriterion, count_correct

PAD = 1


def test_perfect_prediction_scores_every_non_pad_token_and_sequence():
    target = torch.tensor([[4, 5, 6, PAD], [7, 8, PAD, PAD]])
    assert count_correct(target.clone(), target, PAD) == (5, 5, 2)


def test_wrong_predictions_count_a_known_fraction_and_pads_are_excluded():
    target = torch.tensor([[4, 5, 6, PAD], [7, 8, PAD, PAD]])
    predictions = torch.tensor([[4, 9, 6, 3], [0, 0, 9, 9]])  # wrong at pads too: not counted
    assert count_correct(predictions, target, PAD) == (2, 5, 0)
    predictions = torch.tensor([[4, 5, 6, 3], [0, 8, 5, 5]])
    assert count_correct(predictions, target, PAD) == (4, 5, 1)


class FixedLogits(torch.nn.Module):
    """A 'model' whose logits put all mass on given predictions."""

    def __init__(self, predictions, vocab):
        super().__init__()
        self.logits = torch.nn.functional.one_hot(predictions, vocab).float() * 20.0  # (B, T, V)

    def forward(self, src_tokens, src_lengths):
        return self.logits, None

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return torch.log_softmax(net_output[0], -1)

    def get_targets(self, sample, net_output):
        return sample["target"]


class Task:
    def __init__(self, dictionary):
        self.target_dictionary = dictionary


class Dictionary:
    def pad(self):
        return PAD


@pytest.mark.parametrize("predictions, accuracy, seq_accuracy", [
    ([[4, 5, 6, 0], [7, 8, 0, 0]], 100.0, 100.0),
    ([[4, 9, 6, 0], [0, 0, 0, 0]], 40.0, 0.0),
    ([[4, 5, 6, 0], [7, 0, 0, 0]], 80.0, 50.0),
])
def test_criterion_logs_token_and_sequence_accuracy(predictions, accuracy, seq_accuracy):
    target = torch.tensor([[4, 5, 6, PAD], [7, 8, PAD, PAD]])
    sample = {"net_input": {"src_tokens": target, "src_lengths": torch.tensor([4, 4])}, "target": target}
    criterion = TokenAccuracyCriterion(Task(Dictionary()))
    loss, sample_size, log = criterion(FixedLogits(torch.tensor(predictions), 10), sample)
    assert sample_size == 5 and log["n_correct"] == round(accuracy / 20)
    halves = [{k: v for k, v in log.items()}] * 2  # two identical batches in one logging interval
    with metrics.aggregate(new_root=True) as agg:
        TokenAccuracyCriterion.reduce_metrics(halves)
        values = agg.get_smoothed_values()
    assert values["accuracy"] == pytest.approx(accuracy)
    assert values["seq_accuracy"] == pytest.approx(seq_accuracy)
    assert values["n_total"] == 10
    assert values["loss"] > 0 if accuracy < 100 else values["loss"] < 1e-6
