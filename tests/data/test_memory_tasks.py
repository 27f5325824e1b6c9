import numpy as np
import pytest
import torch

from fairseq_urpe.data.memory_tasks import LIMIT, decay_kernel, memory_batch, memory_targets, selector_bins

VALUES = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])


def inputs(values, selectors=None):
    """(B, T) values and selectors -> (B, T, 2) inputs."""
    selectors = np.zeros_like(values) if selectors is None else np.asarray(selectors, dtype=float)
    return np.stack([values, selectors], axis=-1)


def selector_in_bin(k, count):
    """A selector value in the middle of bin ``k`` of ``count``."""
    return -LIMIT + (k + 0.5) * 2 * LIMIT / count


def test_fixed_memory_sums_the_lagged_values_with_zeros_before_the_start():
    # y_t = x_{t-1} + x_{t-3}
    assert memory_targets("fixed", inputs(VALUES), lags=(1, 3)).tolist() == [[0, 1, 2, 3 + 1, 4 + 2]]
    assert memory_targets("fixed", inputs(VALUES), lags=(9,)).tolist() == [[0, 0, 0, 0, 0]]


def test_adaptive_memory_lag_is_chosen_by_the_current_inputs_selector():
    lags = (1, 2)
    bins = [0, 1, 0, 1, 1]  # lag 1, 2, 1, 2, 2
    x = inputs(VALUES, [[selector_in_bin(k, 2) for k in bins]])
    assert memory_targets("adaptive", x, lags=lags).tolist() == [[0, 0, 2, 2, 3]]


def test_nested_memory_second_lag_is_chosen_by_the_token_the_first_lag_points_at():
    # t_1 = 1 everywhere (one lag); t_2 = lags2[bin of x_{t-1}'s selector]
    bins_of_selector = [1, 0, 1, 1, 0]  # at t, x_{t-1} has bin bins[t-1]
    x = inputs(VALUES, [[selector_in_bin(k, 2) for k in bins_of_selector]])
    y = memory_targets("nested", x, lags=(1,), lags2=(1, 3))
    # t=1: x_0 has bin 1 -> t_2 = 3 -> before the start -> 0; t=2: x_1 bin 0 -> t_2 = 1 -> x_1 = 2;
    # t=3: x_2 bin 1 -> x_0 = 1; t=4: x_3 bin 1 -> x_1 = 2. t=0: x_{-1} = 0, the middle (bin 1) -> 0.
    assert y.tolist() == [[0, 0, 2, 1, 2]]


@pytest.mark.parametrize("kind", ["exp", "poly"])
def test_kernel_memory_is_the_unnormalised_convolution_with_the_decay_kernel(kind):
    rho = decay_kernel(kind, 6, scale=2.0, alpha=1.5)
    impulse = inputs(np.array([[1.0, 0, 0, 0, 0, 0]]))
    assert np.allclose(memory_targets("kernel", impulse, kernel=kind, scale=2.0, alpha=1.5), [rho])
    values = np.array([[1.0, -2.0, 3.0]])
    expected = [rho[0], rho[0] * -2 + rho[1], rho[0] * 3 - 2 * rho[1] + rho[2]]
    assert np.allclose(memory_targets("kernel", inputs(values), kernel=kind, scale=2.0, alpha=1.5), [expected])


@pytest.mark.parametrize("kind", ["exp", "poly"])
def test_decay_kernels_lie_in_neither_attention_family(kind):
    """No single lin head (rho ~ e^{-m s}: log rho linear in s) nor log head (rho ~ (1+s)^{-m}: log rho linear
    in log(1+s)) holds the kernel: both straight-line fits leave a clear residual."""
    s = np.arange(64.0)
    log_rho = np.log(decay_kernel(kind, 64, scale=2.0 if kind == "poly" else 4.0, alpha=1.5))
    for feature in (s, np.log1p(s)):
        residual = log_rho - np.polyval(np.polyfit(feature, log_rho, 1), feature)
        assert np.abs(residual).max() > 0.05


def test_content_control_reads_the_last_earlier_position_with_the_same_marker():
    markers = np.array([[0, 1, 0, 1, 0]])
    x = np.concatenate([inputs(VALUES), np.eye(2)[markers]], axis=-1)
    assert memory_targets("content", x).tolist() == [[0, 0, 1, 2, 3]]


def test_selector_bins_are_equally_likely():
    counts = np.bincount(selector_bins(np.random.default_rng(0).uniform(-LIMIT, LIMIT, 40000), 4), minlength=4)
    assert np.allclose(counts / 40000, 0.25, atol=0.01)


@pytest.mark.parametrize("task", ["fixed", "adaptive", "nested", "kernel", "content"])
def test_batches_are_deterministic_per_seed_with_unit_variance_inputs(task):
    x, y = memory_batch(task, 3, 20, seed=5, markers=4)
    x2, y2 = memory_batch(task, 3, 20, seed=5, markers=4)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, memory_batch(task, 3, 20, seed=6, markers=4)[0])
    assert x.shape == (3, 20, 2 + (4 if task == "content" else 0)) and y.shape == (3, 20)
    assert x[..., :2].abs().max() <= LIMIT
    assert np.allclose(memory_targets(task, x.double().numpy()), y.numpy(), atol=1e-5)


def test_unknown_task_and_kernel_are_refused_by_name():
    with pytest.raises(ValueError, match="memory task"):
        memory_targets("induction", inputs(VALUES))
    with pytest.raises(ValueError, match="kernel"):
        decay_kernel("gauss", 4)
