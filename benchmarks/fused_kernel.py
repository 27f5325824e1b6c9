"""The fused Triton kernel alone against PyTorch's flash attention; and an ahead-of-time compile check.

Needs only torch and triton (the kernel is loaded from its file, so fairseq need not be installed).

On a CUDA GPU (the speed target: length 2048, head dim 64, bfloat16, forward+backward within 1.3x of
``scaled_dot_product_attention`` with the flash backend and no bias; the recipe's point: ``--dtype float16
--head-dim 128 --length 3072 --heads 8``):
    python -m benchmarks.fused_kernel                                 # checks against the reference, then times
    python -m benchmarks.fused_kernel --blocks '{"forward": [64, 64, 4]}'   # try other tiles

Anywhere (no GPU needed): compile the kernels for sm_90, sm_80 and sm_86 and report registers, spills, shared
memory, and the SASS (``nvdisasm``) of each loop iteration and per score:
    python -m benchmarks.fused_kernel --compile-check            # COMPILE_CONFIGS; --points: the model's only
"""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import torch

KERNELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_urpe", "kernels")


def load(name: str, path: str = None):
    """``fairseq_urpe/kernels/<name>.py`` (of the folder ``path``, a copy of ``fairseq_urpe/kernels``, if
    given) as a module of that folder loaded as a standalone package (no fairseq import)."""
    folder = os.path.abspath(path or KERNELS)
    package = "urpe_kernels_" + re.sub(r"\W", "_", folder)
    if package not in sys.modules:
        spec = importlib.util.spec_from_file_location(package, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{package}.{name}")


# What the compile check covers: (capability, dtype, head dim, attention dropout[, variant]). Without a
# variant: all tables and key padding (the variant with the most registers, where spills would show
# first). fp32 twice: TF32 products (what auto runs where torch allows TF32) and full-precision ones (what
# --urpe-attention-impl fused forces). POINT_CONFIGS: the performance model's two points, d64 bf16 (GPT-2
# small's heads, L 2048) and d128 fp16 (the _wiki103 archs', L 3072), on sm_90, sm_80 and sm_86 (the 99 KB
# class), with and without dropout, for three kernels: "t5" (both tables, no key padding, tables with a
# constant tail as T5's: the far share, and dQ of far tiles in dK/dV where the tiles ask for it),
# "alibi" (both tables, no key padding, tables that reach T as ALiBi's: no far share, no far tiles run)
# and "flash" (benchmarks/flash_standin.py, the model's SDPA flash).
POINTS = (("bf16", 64), ("fp16", 128))
POINT_CONFIGS = [(cap, dtype, head_dim, dropout, variant) for cap in (90, 80, 86) for dtype, head_dim in POINTS
                 for dropout in (False, True) for variant in ("t5", "alibi", "flash")]
COMPILE_CONFIGS = POINT_CONFIGS + [
    (90, "bf16", 64, False), (90, "bf16", 64, True), (90, "bf16", 128, False), (90, "bf16", 128, True),
    (90, "fp16", 128, True),
    (90, "fp32-tf32", 64, False), (90, "fp32", 64, False), (90, "fp32-tf32", 128, False),
    (80, "bf16", 64, False), (80, "bf16", 64, True), (80, "bf16", 128, True),
    (86, "bf16", 64, True), (86, "bf16", 128, True),
]
SHARED_MEMORY = {90: 227 * 1024, 80: 163 * 1024, 86: 99 * 1024}  # bytes per block
_ELEMENT = {"bf16": ("bf16", "ieee"), "fp16": ("fp16", "ieee"), "fp32": ("fp32", "ieee"), "fp32-tf32": ("fp32", "tf32")}


def compile_kernels(capability: int = 90, dtype: str = "bf16", head_dim: int = 64, blocks=None, report=True,
                    dropout: bool = False, kernel=None, only=("forward", "dkdv", "dq"), tables=(True, True),
                    padding: bool = True, tail: bool = True, deterministic: bool = False, one_pass: bool = False):
    """Compile forward, dK/dV and dQ kernels (``only``; "delta" adds the delta kernel) for
    ``sm_<capability>`` without a GPU (by default all tables and padding on) with the tiles the kernel
    chooses for that architecture. ``tail``: the tables are constant from some distance on (as T5's), so
    that without padding the far share applies; ``False``: they reach T (as ALiBi's), no far share.
    ``deterministic``: the backward without atomics (no far share; dQ's table gradients as partial rows).
    ``one_pass``: the one-pass backward (``blocks`` ``backward="one_pass"``: dK/dV adds dQ and the table
    gradients; no far share; no dQ kernel runs, "dq" is then not compiled).

    ``dtype``: bf16, fp16, fp32 (full-precision products) or fp32-tf32. Returns per kernel a dict: tiles,
    registers and spilled bytes (``None`` where ptxas could not be asked), shared memory, and from the PTX
    the tensor-core instructions (``wgmma`` count, ``mma.sync`` count), the atomics by kind, and the number
    of global load instructions.
    """
    import triton
    import triton.language as tl

    kernel = kernel or load("fused_urpe_attention")
    element, precision = _ELEMENT[dtype]
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[element]
    tiles = load("tiles", os.path.dirname(kernel.__file__))
    major, minor = divmod(capability, 10)
    cfg = {**tiles.gpu_blocks(head_dim, torch_dtype, precision, (major, minor)), **(blocks or {})}
    if one_pass:
        cfg["backward"] = "one_pass"
        only = tuple(name for name in only if name != "dq")
    pointers = {name: f"*{element}" for name in ("Q", "K", "V", "DO", "O", "Out", "DQ", "DK", "DV", "FarOut")}
    pointers.update({name: "*fp32" for name in ("BIAS_TABLE", "C_TABLE", "RowMax", "RowSum", "Delta", "D_BIAS_TABLE",
                                                "D_C_TABLE", "FarMax", "FarSum", "FarDQ")})
    pointers["PAD"], pointers["SEED"] = "*i8", "*i64"
    scalars = {"scale": "fp32", "dropout_p": "fp32", "seed": "i64", "qk_scale": "fp32", "log2e": "fp32",
               "keep_scale": "fp32", "keep_threshold": "i32"}
    common = dict(HAS_BIAS=tables[0], HAS_C=tables[1], HAS_PAD=padding, HAS_DROPOUT=dropout,
                  D=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)), PRECISION=precision, ACC=tl.float32,
                  EXP2=True)
    # The forward's far share where a long sequence would use it, and the backward's far-tile constexprs
    far_share = tail and not deterministic and tiles.far_share_fits(cfg, any(tables), padding)
    far_consts = tiles.far_flags(cfg, far_share)
    far_dq = far_consts["dq"].get("FAR_DQ", False)
    jobs = {
        "forward": (kernel.forward_kernel, cfg["forward"], dict(FAR_SUMS=far_share)),
        "dkdv": (kernel.dkdv_kernel, cfg["dkdv"], dict(ONE_PASS=one_pass, BIAS_GRAD=one_pass and tables[0],
                                                     C_GRAD=one_pass and tables[1], **far_consts["dkdv"])),
        "dq": (kernel.dq_kernel, tiles.dq_tile(cfg, deterministic),
               dict(BIAS_GRAD=tables[0], C_GRAD=tables[1], PARTIALS=deterministic, **far_consts["dq"])),
        # delta = rowsum(dO ⊙ O) (no loop), and with the far share the far tiles' table gradients
        "delta": (kernel.delta_kernel, (64, 1, 4, 1), dict(BLOCK=64, FAR_SUMS=far_share, BIAS_GRAD=tables[0] and far_share,
                                                             C_GRAD=tables[1] and far_share)),
    }
    results = {}
    for name, (fn, tiles, extra) in jobs.items():
        block_m, block_n, warps, stages = (tuple(tiles) + (cfg.get("num_stages", 2),))[:4]
        if name not in only:
            continue
        if dropout and "HAS_DROPOUT" not in fn.arg_names and name != "delta":
            raise ValueError("this kernel has no attention dropout")
        results[name] = compile_one(fn, dict(common, BLOCK_M=block_m, BLOCK_N=block_n, **extra), pointers, scalars,
                                    (block_m, block_n, warps, stages), capability)
        if one_pass and name == "dkdv":  # the model prices dQ's product and atomics on every tile
            results[name]["one_pass"] = True
        if far_share and name == "dq":  # its far tiles are the forward tile's (the model's count)
            results[name]["far_share"] = list(cfg["forward"][:2])
        if far_dq and name in ("dkdv", "dq"):  # dK/dV's far tiles on this grid add dQ; dQ's far loop runs the rest
            results[name]["far_dq_grid"] = [far_consts["dkdv"]["FAR_M"], far_consts["dkdv"]["FAR_N"]]
        if report:
            print_usage(f"sm_{capability} {dtype} d={head_dim}{' dropout' if dropout else ''} {name}", results[name])
    return results


def compile_one(fn, wanted: dict, pointers: dict, scalars: dict, tiles, capability: int) -> dict:
    """Compile the jitted ``fn`` for ``sm_<capability>`` as a launch specializes it: ``wanted``'s entries
    that ``fn`` takes as constexprs, head-dim strides 1, pointers and q/k/v/o/dO strides divisible by 16;
    arguments typed by ``pointers`` and ``scalars`` (int32 otherwise). Returns the report's entry."""
    import triton
    from triton.backends.compiler import GPUTarget

    block_m, block_n, warps, stages = tiles
    constexprs = {arg: value for arg, value in wanted.items() if arg in fn.arg_names}
    # As a launch with contiguous (B, T, H, d)-strided q, k, v, dO (fairseq's layout) specializes: the
    # head-dim strides are 1, pointers and the other q/k/v strides divisible by 16 (vector loads).
    constexprs.update({arg: 1 for arg in fn.arg_names if re.fullmatch(r"stride_\w*d", arg)})
    signature = {arg: "constexpr" if arg in constexprs else pointers.get(arg, scalars.get(arg, "i32"))
                 for arg in fn.arg_names}
    aligned = [i for i, arg in enumerate(fn.arg_names) if signature[arg].startswith("*")
               or re.fullmatch(r"stride_(q|k|v|o|do)?_?[bht]", arg)]
    source = triton.compiler.ASTSource(fn=fn, constexprs=constexprs, signature=signature,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    target = GPUTarget("cuda", capability, 32)
    options = triton.compiler.make_backend(target).parse_options({"num_warps": warps, "num_stages": stages})
    compiled = triton.compile(source, target=target, options=options.__dict__)
    ptx = compiled.asm["ptx"]
    return dict(tiles=(block_m, block_n, warps, stages), shared_bytes=compiled.metadata.shared,
                **_ptxas_usage(ptx, capability), **ptx_instructions(ptx),
                sass=sass_instructions(compiled.asm["cubin"], block_m * block_n / (32 * warps)))


def print_usage(title: str, r: dict):
    print(f"{title}: tiles {r['tiles'][0]}x{r['tiles'][1]}, {r['tiles'][2]} warps, {r['tiles'][3]} stages; "
          f"{r['registers']} registers, {r['spill_bytes']} bytes spilled, {r['shared_bytes']} bytes shared; "
          f"wgmma {r['wgmma']}, mma.sync {r['mma_sync']}, atomics {r['atomics'] or 'none'}; per loop "
          "iteration: " + ", ".join(f"{x['instructions']} instructions ({x['global_loads']} global loads, "
                                    f"{x['async_copies']} async copies, "
                                    f"{x['shared_loads']}/{x['shared_stores']} shared loads/stores)"
                                    for x in r["loops"]), flush=True)
    if r.get("sass"):
        print("    SASS per loop iteration: " + "; ".join(
            f"{x['instructions']} ({x['per_score']} per score; MUFU {x['mufu']}, shared {x['shared']}, SHFL "
            f"{x['shuffle']}, RED/ATOM {x['atomics']}, MMA {x['mma']})" for x in r["sass"]["loops"]), flush=True)


def compile_flash_standin(capability: int = 90, dtype: str = "bf16", head_dim: int = 64, dropout: bool = False,
                          blocks=None, report=True):
    """Compile the stand-in for SDPA flash (benchmarks/flash_standin.py: forward, one-pass backward) as
    :func:`compile_kernels` compiles the fused kernel; ``blocks`` overrides its tiles for that architecture."""
    import triton

    from benchmarks import flash_standin

    element = _ELEMENT[dtype][0]
    arch = {90: "sm_90"}.get(capability, "sm_80")
    cfg = {**flash_standin.GPU_BLOCKS[arch, 64 if head_dim <= 64 else 128], **(blocks or {})}
    pointers = {name: f"*{element}" for name in ("Q", "K", "V", "DO", "Out", "DK", "DV")}
    pointers.update({name: "*fp32" for name in ("LSE", "Delta", "DQ")})
    pointers["SEED"] = "*i64"
    scalars = {"qk_scale": "fp32", "sm_scale": "fp32", "keep_scale": "fp32", "keep_threshold": "i32"}
    common = dict(HAS_DROPOUT=dropout, D=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)))
    results = {}
    for name, fn in (("forward", flash_standin._forward_kernel), ("backward", flash_standin._backward_kernel)):
        tiles = tuple(cfg[name])
        results[name] = compile_one(fn, dict(common, BLOCK_M=tiles[0], BLOCK_N=tiles[1]), pointers, scalars, tiles,
                                    capability)
        if report:
            print_usage(f"sm_{capability} {dtype} d={head_dim}{' dropout' if dropout else ''} flash {name}",
                        results[name])
    return results


def _config_name(cap, dtype, head_dim, dropout, *variant):
    return f"sm_{cap} {dtype} d{head_dim}{' dropout' if dropout else ''}{''.join(' ' + v for v in variant)}"


def ptx_instructions(ptx: str):
    """Counts of chosen instructions in the PTX text: in the whole kernel (static: in the code, not
    executed), and per loop (``loops``: one entry per loop over tiles, the instructions of one iteration)."""
    counts = _count_instructions(ptx)
    lines = ptx.splitlines()
    labels = {line.split(":")[0]: i for i, line in enumerate(lines) if re.match(r"\$L__BB\d+_\d+:", line)}
    loops = []
    for i, line in enumerate(lines):  # a loop: a branch back to a label above it
        target = re.search(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if target and labels.get(target.group(1), i) < i:
            body = lines[labels[target.group(1)]:i + 1]
            loop = _count_instructions("\n".join(body))
            loop["instructions"] = sum(1 for x in body  # labels, comments, braces and directives (.loc) are not
                                       if x.strip() and not x.strip().startswith(("$", "//", "{", "}", ".")))
            loops.append(loop)
    return dict(counts, loops=loops)


def _count_instructions(ptx: str):
    atomics = {}
    for op in re.findall(r"(?<![\w.])((?:atom|red)\.global[\w.]*)", ptx):
        atomics[op] = atomics.get(op, 0) + 1
    return dict(
        wgmma=len(re.findall(r"\bwgmma\.mma_async", ptx)),
        mma_sync=len(re.findall(r"\bmma\.sync", ptx)),
        global_loads=len(re.findall(r"\bld\.global", ptx)),
        async_copies=len(re.findall(r"\bcp\.async\.(?:ca|cg)", ptx)),  # global -> shared, e.g. pipelined loads
        shared_loads=len(re.findall(r"\bld\.shared", ptx)) + len(re.findall(r"\bldmatrix", ptx)),
        shared_stores=len(re.findall(r"\bst\.shared", ptx)) + len(re.findall(r"\bstmatrix", ptx)),
        atomics=atomics,
    )


# SASS opcodes (the mnemonic before its first dot) by what they use: the special-function unit, shared
# memory (loads, stores, matrix loads/stores, shared atomics), warp shuffles, global atomics/reductions,
# tensor-core products (Ampere's warp-level HMMA, Hopper's warpgroup HGMMA), global memory (LDGSTS: the
# asynchronous global -> shared copy) and barriers.
SASS_CLASSES = {
    "mufu": ("MUFU",), "shared": ("LDS", "STS", "LDSM", "STSM", "ATOMS"), "shuffle": ("SHFL",),
    "atomics": ("RED", "REDG", "ATOM", "ATOMG"), "mma": ("HMMA", "HGMMA"),
    "global": ("LDG", "STG", "LDGSTS", "UTMALDG", "UBLKCP"), "barriers": ("BAR",),
}
_SASS_LINE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)([.\w]*)(.*)$")
_SASS_LABEL = re.compile(r"^(\.L_x_\d+):")


def sass_instructions(cubin: bytes, scores_per_thread: float) -> dict:
    """:func:`parse_sass` of what ``nvdisasm -c`` (bundled with Triton) prints for ``cubin``; None where
    Triton has no nvdisasm."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    if not os.path.exists(tool) or not cubin:
        return None
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        text = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    return parse_sass(text, scores_per_thread)


def parse_sass(text: str, scores_per_thread: float) -> dict:
    """Counts of the SASS instructions in ``text`` (nvdisasm's listing) by ``SASS_CLASSES``: in the whole
    kernel (static: in the code, not executed), and per loop (``loops``: one entry per loop over tiles,
    the instructions of one iteration, in address order).

    A loop is found by its back edge: a branch (``BRA``, predicated or not) to a label at a lower address
    than the branch itself; its iteration is every instruction from the label to the branch, both
    included. A loop whose range lies inside another's is counted in it and not listed (``inner_loops``
    says how many it holds); a branch to itself (the idle ``BRA`` after the last ``EXIT``) is no loop.
    ``NOP`` (alignment padding) is not counted. ``per_score``: thread-instructions per score of the tile,
    ``instructions x 32 warps / (BLOCK_M x BLOCK_N)``, i.e. ``instructions / scores_per_thread``.
    """
    code, labels, branches = [], {}, []  # opcodes; label -> index in code; (index, target label)
    for line in text.splitlines():
        label = _SASS_LABEL.match(line.strip())
        if label:
            labels[label.group(1)] = len(code)
            continue
        m = _SASS_LINE.match(line)
        if not m or m.group(2) == "NOP":
            continue
        if m.group(2) == "BRA":
            target = re.search(r"(\.L_x_\d+)", m.group(4))
            if target:
                branches.append((len(code), target.group(1)))
        code.append(m.group(2))
    spans = sorted({(labels[t], i) for i, t in branches if t in labels and labels[t] < i})
    loops = []
    for a, b in spans:
        if any(c <= a and b <= d and (c, d) != (a, b) for c, d in spans):
            continue  # inside another loop
        loop = _count_sass(code[a:b + 1])
        loop["per_score"] = round(loop["instructions"] / scores_per_thread, 2)
        loop["inner_loops"] = sum(1 for c, d in spans if a <= c and d <= b and (c, d) != (a, b))
        loops.append(loop)
    return dict(_count_sass(code), loops=loops)


def _count_sass(opcodes) -> dict:
    out = {"instructions": len(opcodes)}
    for name, members in SASS_CLASSES.items():
        out[name] = sum(1 for op in opcodes if op in members)
    return out


def _ptxas_usage(ptx: str, capability: int):
    """Registers and spill stores as Triton's bundled ptxas reports them (None where it cannot say)."""
    import triton

    folder = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    for ptxas in ("ptxas-blackwell", "ptxas"):
        path = os.path.join(folder, ptxas)
        if not os.path.exists(path):
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
        try:
            out = subprocess.run([path, "-v", "--gpu-name", arch, f.name, "-o", os.devnull],
                                 capture_output=True, text=True).stderr
        finally:
            os.unlink(f.name)
        regs, spill = re.search(r"Used (\d+) registers", out), re.search(r"(\d+) bytes spill stores", out)
        if regs:
            return dict(registers=int(regs.group(1)), spill_bytes=int(spill.group(1)) if spill else 0)
    return dict(registers=None, spill_bytes=None)


def check_and_time(args):
    """On CUDA: correctness against the reference at a small awkward shape, then the timings."""
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel, reference = load("fused_urpe_attention"), load("reference")
    fused = kernel.fused_causal_urpe_attention
    device, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    blocks = json.loads(args.blocks) if args.blocks else None

    torch.manual_seed(0)
    for check_dtype, tol in ((torch.float32, 2e-3), (dtype, 3e-2)):  # TF32 may be on for float32 matmuls
        q, k, v = (torch.randn(2, 3, 333, 64, device=device, dtype=check_dtype, requires_grad=True) for _ in range(3))
        b = torch.randn(3, 333, device=device, requires_grad=True)
        c = torch.rand(3, 333, device=device).add(0.5).requires_grad_()
        pad = torch.zeros(2, 333, dtype=torch.bool, device=device)
        pad[1, :5] = True
        out, want = fused(q, k, v, b, c, pad, blocks=blocks), reference.causal_urpe_attention_reference(q, k, v, b, c, pad)
        g = torch.randn_like(out)
        got_grads = torch.autograd.grad(out, (q, k, v, b, c), g)
        want_grads = torch.autograd.grad(want, (q, k, v, b, c), g)
        for name, x, y in zip(("out", "dq", "dk", "dv", "dbias", "dc"), (out,) + got_grads, (want,) + want_grads):
            err = ((x.float() - y.float()).abs().max() / y.float().abs().max().clamp(min=1e-6)).item()
            print(f"check {check_dtype}: {name} max error / max value = {err:.2e}", flush=True)
            assert err < tol, f"{name} differs from the reference ({err:.2e})"

    from benchmarks import flash_standin

    q, k, v = (torch.randn(2, 3, 333, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    out, g = flash_standin.flash_standin_attention(q, k, v), torch.randn_like(want)
    for name, x, y in zip(("out", "dq", "dk", "dv"), (out,) + torch.autograd.grad(out, (q, k, v), g),
                          (want,) + torch.autograd.grad(want, (q, k, v), g)):
        err = ((x.float() - y.float()).abs().max() / y.float().abs().max().clamp(min=1e-6)).item()
        print(f"check the flash stand-in against SDPA flash, {dtype}: {name} max error / max value = {err:.2e}", flush=True)
        assert err < 3e-2, f"the stand-in's {name} differs from SDPA flash ({err:.2e})"

    results = {}
    batch, heads, length, dim, p = args.batch, args.heads, args.length, args.head_dim, args.dropout
    q, k, v = (torch.randn(batch, heads, length, dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    b = torch.randn(heads, length, device=device, requires_grad=True)
    c = torch.rand(heads, length, device=device).add(0.5).requires_grad_()
    # transformer_lm_urpe's default tables: T5's 32 buckets up to 128 are constant from distance 113 on
    b_lm, c_lm = b[:, :114].detach().clone().requires_grad_(), c[:, :114].detach().clone().requires_grad_()
    grad = torch.randn_like(q)

    def sdpa(dropout_p=0.0):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)

    cases = {
        "sdpa_flash_no_bias": sdpa,
        f"sdpa_flash_dropout_{p}": lambda: sdpa(p),
        "flash_standin": lambda: flash_standin.flash_standin_attention(q, k, v),
        f"flash_standin_dropout_{p}": lambda: flash_standin.flash_standin_attention(q, k, v, p),
        "fused_lm_tables": lambda: fused(q, k, v, b_lm, c_lm, blocks=blocks),
        f"fused_lm_tables_dropout_{p}": lambda: fused(q, k, v, b_lm, c_lm, dropout_p=p, blocks=blocks),
        "fused_lm_tables_deterministic": lambda: fused(q, k, v, b_lm, c_lm, blocks=blocks, deterministic=True),
        "fused_bias_and_toeplitz": lambda: fused(q, k, v, b, c, blocks=blocks),
        "fused_no_tables": lambda: fused(q, k, v, blocks=blocks),
        "dense_reference": lambda: reference.causal_urpe_attention_reference(q, k, v, b, c),
    }
    for name, fn in cases.items():
        try:
            forward_ms = triton.testing.do_bench(fn)
            both_ms = triton.testing.do_bench(lambda: torch.autograd.grad(fn(), (q, k, v), grad))
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            torch.autograd.grad(fn(), (q, k, v), grad)
            extra = torch.cuda.max_memory_allocated() - base
        except torch.cuda.OutOfMemoryError:
            results[name] = "out of memory"
            continue
        results[name] = dict(forward_ms=forward_ms, forward_backward_ms=both_ms, peak_extra_bytes=extra)
        print(f"{name}: forward {forward_ms:.3f} ms, forward+backward {both_ms:.3f} ms, "
              f"peak extra memory {extra / 2**20:.1f} MiB", flush=True)
    ref = results["sdpa_flash_no_bias"]["forward_backward_ms"]
    for name in cases:
        if name != "sdpa_flash_no_bias" and isinstance(results.get(name), dict):
            results[name]["forward_backward_vs_sdpa_flash"] = results[name]["forward_backward_ms"] / ref
            print(f"{name} / sdpa flash (no dropout), forward+backward: "
                  f"{results[name]['forward_backward_vs_sdpa_flash']:.2f}", flush=True)
    print("predicted (docs/performance.md): python -m benchmarks.gpu_check.prediction", flush=True)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compile-check", action="store_true",
                        help="compile for sm_90, sm_80, sm_86 (COMPILE_CONFIGS, or --dtype/--head-dim if given); no GPU needed")
    parser.add_argument("--kernel-file", default=None,
                        help="compile the kernels of this copy of fairseq_urpe/kernels instead (e.g. an older commit's)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--head-dim", type=int, default=None, help="default 64 (timing); all of COMPILE_CONFIGS (compile)")
    parser.add_argument("--dropout", type=float, default=0.1, help="attention dropout of the timed dropout cases")
    parser.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                        help="default bfloat16 (timing); all of COMPILE_CONFIGS (compile)")
    parser.add_argument("--blocks", default=None, help="JSON overriding the kernel's tiles, e.g. '{\"dq\": [64, 32, 4, 2]}'")
    parser.add_argument("--points", action="store_true", help="compile only POINT_CONFIGS (the model's entries)")
    parser.add_argument("--only", nargs="+", default=None, help="compile only these configs, by name (e.g. 'sm_90 bf16 d64')")
    parser.add_argument("--one-pass", action="store_true",
                        help="with --compile-check --points: the one-pass backward's dK/dV kernel instead, at sm_90's "
                             "URPE points, with tiles.ONE_PASS_BLOCKS (or --blocks)")
    parser.add_argument("--json", default="benchmarks/results/fused_kernel.json")
    args = parser.parse_args(argv)
    from benchmarks.common import command_line, machine, print_machine, write_json  # fairseq-free

    info = machine()
    print_machine(info)
    if args.compile_check:
        blocks = json.loads(args.blocks) if args.blocks else None
        kernel = load("fused_urpe_attention", args.kernel_file)
        configs = POINT_CONFIGS if args.points else COMPILE_CONFIGS
        if args.one_pass:
            configs = [c for c in POINT_CONFIGS if c[0] == 90 and c[4] != "flash"]
        if args.dtype or args.head_dim:
            short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32-tf32", None: "bf16"}[args.dtype]
            configs = [(cap, short, args.head_dim or 64, False) for cap in (90, 80)]
        if args.only:
            configs = [c for c in configs if any(_config_name(*c) == name for name in args.only)]
        results = {}
        for config in configs:
            cap, dtype, head_dim, dropout = config[:4]
            name = _config_name(*config)
            try:
                if config[4:] == ("flash",):
                    results[name] = compile_flash_standin(cap, dtype, head_dim, dropout)
                elif args.one_pass:
                    tiles = load("tiles", os.path.dirname(kernel.__file__))
                    results[name] = compile_kernels(cap, dtype, head_dim, blocks or tiles.ONE_PASS_BLOCKS[head_dim],
                                                    dropout=dropout, kernel=kernel, padding=False, only=("dkdv",),
                                                    tail=config[4:] != ("alibi",), one_pass=True)
                else:
                    results[name] = compile_kernels(cap, dtype, head_dim, blocks, dropout=dropout, kernel=kernel,
                                                    padding=not config[4:], tail=config[4:] != ("alibi",))
            except Exception as error:  # e.g. a kernel without dropout; the others still compile
                results[name] = f"not compiled: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
                print(f"{name}: {results[name]}", flush=True)
            write_json(args.json, {"benchmark": "fused_kernel", "command": command_line(__file__, argv), "machine": info,
                                   "settings": {k: v for k, v in vars(args).items() if k != "json"},
                                   "results": results})  # after every config: a killed run keeps what it compiled
    elif not torch.cuda.is_available():
        sys.exit("no CUDA device: the kernel's speed cannot be measured here (--compile-check works without one)")
    else:
        args.dtype, args.head_dim = args.dtype or "bfloat16", args.head_dim or 64
        results = check_and_time(args)
    write_json(args.json, {"benchmark": "fused_kernel", "command": command_line(__file__, argv), "machine": info,
                           "settings": {k: v for k, v in vars(args).items() if k != "json"}, "results": results})
    return results


if __name__ == "__main__":
    main()
