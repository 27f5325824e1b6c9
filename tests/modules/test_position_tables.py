"""PositionTables: the modules evaluated once per distance, laid out as the attention reads them, and
shared within one forward."""

import threading

import torch

from fairseq_urpe.modules import LogBias, PositionModules, T5RelativeBias, ToeplitzReweighting


def modules():
    torch.manual_seed(0)
    bias, c = T5RelativeBias(3, 8, 10), ToeplitzReweighting(3, "unique", max_distance=6)
    torch.nn.init.normal_(bias.weight)
    torch.nn.init.normal_(c.weight)
    return PositionModules(bias, c)


def test_tables_expand_to_the_modules_matrices_and_their_causal_part_is_the_first_key_column():
    positions = modules()
    for tgt_len, src_len in [(9, 9), (1, 13), (4, 11)]:
        tables = positions.tables(tgt_len, src_len, torch.device("cpu"), torch.float32)
        queries, keys = torch.arange(src_len - tgt_len, src_len), torch.arange(src_len)
        for table, module in [(tables.bias, positions.position_bias), (tables.reweight, positions.toeplitz)]:
            assert table.shape == (3, tgt_len + src_len - 1)
            assert torch.equal(table[:, tables.index], module(queries, keys))  # (H, T, S)
            assert torch.equal(tables.causal(table), module(keys, keys[:1])[:, :, 0])  # distances 0 .. S-1
    tables = positions.tables(5, 5, torch.device("cpu"), torch.float32)
    tables.causal(tables.bias).sum().backward()  # the kernel's view still reaches b's parameters
    assert positions.position_bias.weight.grad.abs().sum() > 0


def test_one_forward_shares_tables_per_call_shape_and_grad_mode_and_only_inside():
    positions = PositionModules(LogBias(2))
    make = lambda: positions.tables(3, 7, torch.device("cpu"), torch.float32)  # noqa: E731
    assert make() is not make()  # outside: computed afresh
    with positions.one_forward():
        first = make()
        assert make() is first and positions.tables(1, 7, torch.device("cpu"), torch.float32) is not first
        with torch.no_grad():
            assert make() is not first and not make().bias.requires_grad  # a no-grad call gets tables without graph
        seen = []
        thread = threading.Thread(target=lambda: seen.append(make()))
        thread.start()
        thread.join()
        assert seen[0] is not first  # another thread is another forward
    assert make() is not first


def constant_from_by_scan(module, reach=400):
    """The first causal distance from which ``module.by_distance`` no longer changes, found by looking."""
    values = module.by_distance(torch.arange(reach))  # (H, reach)
    changes = (values[:, 1:] != values[:, :-1]).any(0).nonzero()
    return int(changes[-1]) + 1 if len(changes) else 0


def test_constant_from_is_where_each_table_stops_changing_and_none_for_lines_and_logs():
    from fairseq_urpe.modules import ALiBiBias, LearnedDistanceBias

    torch.manual_seed(1)
    tables = [T5RelativeBias(2, 8, 10), T5RelativeBias(2, 32, 128), T5RelativeBias(2, 6, 40, bidirectional=True),
              ToeplitzReweighting(2, "bucketed", 16, 50), ToeplitzReweighting(2, "unique", max_distance=6),
              LearnedDistanceBias(2, max_distance=12)]
    for table in tables:
        torch.nn.init.normal_(table.weight)  # every entry different
        assert table.constant_from == constant_from_by_scan(table), table
    assert T5RelativeBias(2, 32, 128).constant_from <= 128
    assert ALiBiBias(2).constant_from is None and LogBias(2).constant_from is None


def test_kernel_tables_stop_where_the_tables_turn_constant():
    positions = modules()  # b: T5 buckets (8, max 10), c: one entry per distance up to 6
    tables = positions.tables(30, 30, torch.device("cpu"), torch.float32)
    b, c = tables.kernel_tables()
    assert b.shape == (3, positions.position_bias.constant_from + 1) and c.shape == (3, 7)
    for short, full in ((b, tables.causal(tables.bias)), (c, tables.causal(tables.reweight))):
        last = short.size(1) - 1
        assert torch.equal(full[:, : last + 1], short) and torch.equal(full[:, last:], short[:, last:].expand(-1, 30 - last))
    few = positions.tables(4, 4, torch.device("cpu"), torch.float32).kernel_tables()  # shorter than the tables
    assert [t.size(1) for t in few] == [4, 4]


def test_constant_from_of_a_table_that_refuses_long_inputs_does_not_read_past_it():
    table = ToeplitzReweighting(2, "unique", max_distance=6, beyond_max="error")
    assert table.constant_from == 6
    table.by_distance(torch.arange(7))  # within the table: fine
