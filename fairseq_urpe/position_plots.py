"""Plot what a trained RPE/URPE language model learned.

    python -m fairseq_urpe.position_plots CHECKPOINT --out DIR [--sentence "The jury said ."] [--data DIR]

Writes to DIR:
  positions.png            per layer (one row when b and c are shared) and head: the bias b_h(k) and
                           URPE's reweighting c_h(k) against the distance k = i - j (a bias of the query
                           and key positions, FIRE's: b_h(i, i - k) for the queries i = K/4, K/2 and K)
  attention_layer<N>.png   per head, for the sentence: A = softmax(QK^T/sqrt(d) + B) before and
                           A ⊙ C after the Toeplitz reweighting (rows: queries, columns: keys)

The sentence is split on whitespace and looked up in the model's dictionary (apply the BPE yourself
for BPE models); unknown words become <unk>. The dictionary is read from --data, else from the
checkpoint's folder, else from the data path stored in the checkpoint.
"""

import argparse
import dataclasses
import logging
import os
import pickle
import sys
from pathlib import Path
from typing import List, Optional

import torch

from .modules.position_tables import reads_by_distance

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_SENTENCE = "The committee said that the city would have to pay for the new school ."


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_urpe.position_plots", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", help="a checkpoint written by fairseq-train with --user-dir fairseq_urpe")
    parser.add_argument("--out", required=True, help="folder for the PNG files (created if missing)")
    parser.add_argument("--sentence", default=DEFAULT_SENTENCE, help="input for the attention maps (tokenized text)")
    parser.add_argument("--data", help="folder holding the model's dict.txt")
    parser.add_argument("--max-distance", type=int,
                        help="largest distance k to plot (default: the longest it was trained on, --tokens-per-sample - 1)")
    parser.add_argument("--dpi", type=int, default=110)
    parser.add_argument("--trust-checkpoint-code", action="store_true", default=None,
                        help="load a checkpoint that needs code to load (full unpickling runs whatever the file "
                        "carries: only for files from a source you trust; also TRUST_CHECKPOINT_CODE=1)")
    return parser.parse_args(argv)


def find_data_dir(checkpoint: Path, data: Optional[str], state: dict) -> str:
    candidates = [data] if data else [str(checkpoint.parent), str(state["cfg"]["task"].get("data", ""))]
    for folder in candidates:
        if folder and os.path.isfile(os.path.join(folder, "dict.txt")):
            return folder
    if data:
        raise SystemExit(f"error: --data {data} holds no dict.txt")
    raise SystemExit(f"error: no dict.txt beside {checkpoint} or at the checkpoint's data path; pass --data DIR")


def load(checkpoint: Path, data: Optional[str], trust_code: Optional[bool] = None):
    from fairseq import checkpoint_utils, utils

    from .checkpoint_file import checkpoint_loading

    if not checkpoint.is_file():
        raise SystemExit(f"error: checkpoint {checkpoint} does not exist")
    utils.import_user_module(argparse.Namespace(user_dir=str(PACKAGE_DIR)))
    try:
        with checkpoint_loading(checkpoint, trust_code):  # as data, unless --trust-checkpoint-code
            state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
            data_dir = find_data_dir(checkpoint, data, state)
            models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                              arg_overrides={"data": data_dir})
    except (pickle.UnpicklingError, ValueError) as error:
        raise SystemExit(f"error: {error}") from error
    model = models[0].eval()
    if not hasattr(model.decoder.layers[0].self_attn, "positions"):
        raise SystemExit(f"error: {checkpoint} is not a fairseq_urpe model (arch {cfg.model._name})")
    return model, cfg, task


def position_modules(model):
    """``[(label, PositionModules)]``: one entry if the layers share them, else one per layer."""
    decoder = model.decoder
    if getattr(decoder, "shared_positions", None) is not None:
        return [(f"all {len(decoder.layers)} layers (shared)", decoder.shared_positions)]
    return [(f"layer {i}", layer.self_attn.positions) for i, layer in enumerate(decoder.layers)]


def distance_tables(positions, max_distance: int):
    """``{"b": (H, K + 1) or None, "c": ...}``: the tables at distances ``0 .. K``, read as the attention reads them."""
    with torch.no_grad():
        tables = positions.tables(1, max_distance + 1, torch.device("cpu"), torch.float32)  # one query, K + 1 keys
    return {"b": tables.causal(tables.bias), "c": tables.causal(tables.reweight)}


def query_rows(bias, max_distance: int):
    """For a bias of ``(i, j)`` (FIRE): ``{i: (H, i + 1)}``, ``b_h(i, i - k)`` at ``k = 0 .. i``, for the query
    positions ``i = K/4, K/2, K`` (``K = max_distance``), each computed as a decoding step computes it."""
    rows = {}
    with torch.no_grad():
        for i in sorted({max(max_distance // 4, 1), max(max_distance // 2, 1), max_distance}):
            keys = torch.arange(i + 1)
            rows[i] = bias(keys[-1:], keys)[:, 0].flip(-1)  # (H, i + 1): entry k is key i - k
    return rows


def plot_query_rows(ax, bias, max_distance: int, label: str) -> None:
    """:func:`query_rows` on ``ax``: one colour per head, one line style per query position."""
    rows = query_rows(bias, max_distance)
    styles = dict(zip(sorted(rows, reverse=True), ("-", "--", ":")))
    for i, values in rows.items():
        for h, curve in enumerate(values.float()):
            ax.plot(range(i + 1), curve.numpy(), styles[i], color=f"C{h % 10}", linewidth=1.2,
                    label=f"head {h}" if i == max_distance else None)
    queries = ", ".join(f"{i} ({'solid' if styles[i] == '-' else 'dashed' if styles[i] == '--' else 'dotted'})"
                        for i in sorted(rows, reverse=True))
    ax.set_title(f"{label}: bias $b_h(i, i - k)$ of query i = {queries}", fontsize=10)
    ax.set_xlabel("distance k = i - j (query minus key position)")
    ax.set_ylabel("$b_h(i, i - k)$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(rows[max_distance]) > 8 else 1, loc="best")


def plot_positions(model, max_distance: int, path: Path, dpi: int):
    import matplotlib.pyplot as plt

    rows = position_modules(model)
    distance = torch.arange(max_distance + 1)
    columns = [("b", "bias $b_h(k)$ (added to the scores)"), ("c", "URPE $c_h(k)$ (multiplies the probabilities)")]
    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 3.2 * len(rows)), squeeze=False)
    for row, (label, positions) in enumerate(rows):
        tables = distance_tables(positions, max_distance)
        for col, (name, title) in enumerate(columns):
            ax = axes[row][col]
            if name == "b" and positions.position_bias is not None and not reads_by_distance(positions.position_bias):
                plot_query_rows(ax, positions.position_bias, max_distance, label)
                continue
            values = tables[name]  # (H, K + 1)
            if values is None:
                what = "no Toeplitz C (RPE: C = 1)"
                if name == "b":
                    what = "no bias b: q, k rotated by position" if positions.rotary is not None else "no position bias"
                ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes)
                ax.set_axis_off()
                ax.set_title(f"{label}: {title}", fontsize=10)
                continue
            for h, curve in enumerate(values.float()):
                ax.plot(distance.numpy(), curve.numpy(), label=f"head {h}", linewidth=1.2)
            ax.set_title(f"{label}: {title}", fontsize=10)
            ax.set_xlabel("distance k = i - j (query minus key position)")
            ax.set_ylabel(f"${name}_h(k)$")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2 if values.size(0) > 8 else 1, loc="best")
    kinds = ", ".join(type(module).__name__ for _, module in rows[0][1].items()) or "no position modules"
    fig.suptitle(f"Learned relative positions ({kinds}, {model.decoder.layers[0].self_attn.num_heads} heads)")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def attention_maps(model, tokens: torch.Tensor):
    """``[(A, A ⊙ C or None)]`` per layer, each ``(H, T, T)``, from one forward pass over ``tokens`` (1, T)."""
    inputs, hooks = {}, []
    for i, layer in enumerate(model.decoder.layers):
        def keep_input(module, args, kwargs, i=i):
            inputs[i] = kwargs["query"] if "query" in kwargs else args[0]

        hooks.append(layer.self_attn.register_forward_pre_hook(keep_input, with_kwargs=True))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    length = tokens.size(1)
    causal = torch.full((length, length), float("-inf")).triu(1)
    maps = []
    with torch.no_grad():
        for i, layer in enumerate(model.decoder.layers):
            attn, x = layer.self_attn, inputs[i]
            tables = attn.positions.tables(length, length, x.device, x.dtype)
            after = attn(x, None, None, attn_mask=causal, need_head_weights=True, position_tables=tables)[1][:, 0]  # (H, T, T)
            without_c = dataclasses.replace(tables, reweight=None)
            before = attn(x, None, None, attn_mask=causal, need_head_weights=True, position_tables=without_c)[1][:, 0]
            maps.append((before, after if tables.reweight is not None else None))
    return maps


def plot_attention(before, after, words: List[str], layer: int, path: Path, dpi: int):
    import matplotlib.pyplot as plt

    heads = before.size(0)
    panels = [("A = softmax(scores)", before)] + ([("A ⊙ C (URPE)", after)] if after is not None else [])
    size = 0.22 * len(words) + 1.5
    fig, axes = plt.subplots(heads, len(panels), figsize=(size * len(panels) + 1, size * heads), squeeze=False)
    for h in range(heads):
        for col, (title, maps) in enumerate(panels):
            ax = axes[h][col]
            image = ax.imshow(maps[h].float().numpy(), cmap="viridis", aspect="equal")
            ax.set_title(f"layer {layer}, head {h}: {title}", fontsize=9)
            ax.set_xticks(range(len(words)))
            ax.set_xticklabels(words, rotation=90, fontsize=7)
            ax.set_yticks(range(len(words)))
            ax.set_yticklabels(words, fontsize=7)
            ax.set_xlabel("key")
            ax.set_ylabel("query")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plotted_distance(asked: Optional[int], cfg) -> int:
    """The largest distance to plot: ``asked`` (``--max-distance``), else the longest the model was trained
    on (``tokens_per_sample - 1``); ``SystemExit`` naming ``--max-distance`` where the model refuses it."""
    trained = int(cfg.task.tokens_per_sample) - 1
    distance = trained if asked is None else asked
    if distance <= 0:
        raise SystemExit(f"error: --max-distance must be a positive integer, got {distance}")
    model = cfg.model
    if (getattr(model, "urpe_toeplitz", None) == "unique" and getattr(model, "urpe_beyond_max", None) == "error"
            and distance > model.urpe_max_distance):
        raise SystemExit(f"error: --max-distance must be at most {model.urpe_max_distance} for this model: its "
                         f"per-distance C ends there and refuses farther distances; got {distance}")
    return distance


def write_plots(argv: Optional[List[str]] = None) -> List[Path]:
    """Parse ``argv``, write the plots, return their paths."""
    args = parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's root logger would show its debug lines
    checkpoint = Path(args.checkpoint)
    model, cfg, task = load(checkpoint, args.data, args.trust_checkpoint_code)
    max_distance = plotted_distance(args.max_distance, cfg)
    words = args.sentence.split()
    if not words:
        raise SystemExit("error: --sentence is empty")
    dictionary = task.source_dictionary
    ids = [dictionary.eos()] + [dictionary.index(w) for w in words]  # fairseq LMs start after </s>
    shown = ["</s>"] + [w if dictionary.index(w) != dictionary.unk() else f"{w} (unk)" for w in words]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "positions.png"]
    plot_positions(model, max_distance, written[0], args.dpi)
    try:
        maps = attention_maps(model, torch.tensor([ids]))
    except ValueError as error:  # a C that refuses distances past its table (--urpe-beyond-max error)
        raise SystemExit(f"error: --sentence of {len(ids)} tokens (with the leading </s>) is too long for this model: {error}")
    for layer, (before, after) in enumerate(maps):
        written.append(out / f"attention_layer{layer}.png")
        plot_attention(before, after, shown, layer, written[-1], args.dpi)
    return written


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of ``python -m fairseq_urpe.position_plots`` and ``fairseq-urpe-inspect``: prints the files written."""
    for path in write_plots(argv):
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
