import numpy as np
import pytest
import torch

from fairseq_urpe.data.memory_tasks import decay_kernel, memory_batch, memory_targets

VALUES = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])


def test_fixed_memory_sums_the_lagged_values_with_zeros_before_the_start():
    # y_t = x_{t-1} + x_{t-3}
    assert memory_targets("fixed", VALUES, lags=(1, 3)).tolist() == [[0, 1, 2, 3 + 1, 4 + 2]]


def test_fixed_memory_lag_beyond_the_sequence_contributes_nothing():
    assert memory_targets("fixed", VALUES, lags=(9,)).tolist() == [[0, 0, 0, 0, 0]]


def test_adaptive_memory_reads_the_last_earlier_position_with_the_same_marker():
    markers = np.array([[0, 1, 0, 1, 0]])
    assert memory_targets("adaptive", VALUES, markers).tolist() == [[0, 0, 1, 2, 3]]
    markers = np.array([[2, 2, 2, 5, 2]])
    assert memory_targets("adaptive", VALUES, markers).tolist() == [[0, 1, 2, 0, 3]]


def test_nested_memory_reads_one_after_the_match():
    markers = np.array([[0, 1, 0, 1, 0]])
    assert memory_targets("nested", VALUES, markers).tolist() == [[0, 0, 2, 3, 4]]


@pytest.mark.parametrize("task, rho", [
    ("exp", np.exp(-np.arange(3) / 2.0)),
    ("poly", (1.0 + np.arange(3)) ** -1.0),
])
def test_decaying_memories_average_the_available_past_with_the_kernel(task, rho):
    assert np.allclose(decay_kernel(task, 3, tau=2.0, alpha=1.0), rho)
    z = np.cumsum(rho)  # Z_t = rho(0) + ... + rho(t)
    impulse = np.array([[1.0, 0.0, 0.0]])
    assert np.allclose(memory_targets(task, impulse, tau=2.0, alpha=1.0), [rho / z])
    values = np.array([[1.0, 2.0, 3.0]])
    expected = [1.0, (rho[0] * 2 + rho[1] * 1) / z[1], (rho[0] * 3 + rho[1] * 2 + rho[2] * 1) / z[2]]
    assert np.allclose(memory_targets(task, values, tau=2.0, alpha=1.0), [expected])


@pytest.mark.parametrize("task", ["fixed", "adaptive", "nested", "exp", "poly"])
def test_batches_are_deterministic_per_seed_and_carry_values_in_channel_0(task):
    x, y = memory_batch(task, 3, 20, markers=4, seed=5)
    x2, y2 = memory_batch(task, 3, 20, markers=4, seed=5)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, memory_batch(task, 3, 20, markers=4, seed=6)[0])
    assert x.shape == (3, 20, 5) and y.shape == (3, 20)
    markers = x[..., 1:].argmax(-1).numpy() if task in ("adaptive", "nested") else None
    assert np.allclose(memory_targets(task, x[..., 0].double().numpy(), markers), y.numpy(), atol=1e-5)
