"""``--criterion token_accuracy``: cross-entropy per target token, and the share of tokens (and of whole
sequences) predicted exactly, which fairseq logs as ``accuracy`` and ``seq_accuracy`` (percent)."""

import math

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion


def count_correct(predictions: torch.Tensor, target: torch.Tensor, padding_idx: int):
    """``(correct tokens, scored tokens, correct sequences)`` of ``predictions``/``target`` (B, T);
    positions whose target is ``padding_idx`` are neither counted nor can they make a sequence wrong."""
    scored = target.ne(padding_idx)  # (B, T)
    hit = predictions.eq(target) & scored
    return int(hit.sum()), int(scored.sum()), int((hit | ~scored).all(dim=1).sum())


@register_criterion("token_accuracy")
class TokenAccuracyCriterion(FairseqCriterion):
    def __init__(self, task):
        super().__init__(task)

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)  # (B, T, V)
        target = model.get_targets(sample, net_output)  # (B, T)
        loss = F.nll_loss(lprobs.flatten(0, 1), target.flatten(), ignore_index=self.padding_idx,
                          reduction="sum" if reduce else "none")
        n_correct, n_total, seq_correct = count_correct(lprobs.argmax(-1), target, self.padding_idx)
        logging_output = {
            "loss": loss.data,
            "ntokens": n_total,
            "nsentences": target.size(0),
            "sample_size": n_total,
            "n_correct": n_correct,
            "n_total": n_total,
            "seq_correct": seq_correct,
        }
        return loss, n_total, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        loss, sample_size = total("loss"), total("sample_size")
        metrics.log_scalar("loss", loss / max(sample_size, 1) / math.log(2), sample_size, round=3)  # bits, as fairseq
        # Counts are summed over the logging interval (older fairseq without log_scalar_sum shows their
        # mean per batch instead; the derived accuracies use the sums either way).
        log_sum = getattr(metrics, "log_scalar_sum", metrics.log_scalar)
        for key, value in (("n_correct", total("n_correct")), ("n_total", total("n_total")),
                           ("seq_correct", total("seq_correct")), ("n_sequences", total("nsentences"))):
            log_sum(key, value)
        metrics.log_derived(
            "accuracy",
            lambda m: round(100.0 * m["n_correct"].sum / m["n_total"].sum, 3) if m["n_total"].sum > 0 else float("nan"),
        )
        metrics.log_derived(
            "seq_accuracy",
            lambda m: round(100.0 * m["seq_correct"].sum / m["n_sequences"].sum, 3)
            if m["n_sequences"].sum > 0 else float("nan"),
        )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
