"""The recipe commands and knob values a README advertises, as (script, knobs) to dry-run.

Two sources: every ``bash examples/wikitext103/<script>`` line of the README's ``bash`` code blocks, with
the ``KNOB=value`` assignments before it; and every inline code span made only of assignments (``SMOKE=1``,
``TOKENS_PER_SAMPLE=512 MAX_TOKENS=9216``), possibly followed by ``bash [path/]<script>``. A bare span goes
to the first of ``WALKED + SKIPPED`` whose ``--help`` documents all its knobs; spans of one script are
merged into as few dry runs as their knobs allow (``merged``).
"""

import re
import shlex
from typing import Dict, List, Optional, Tuple

from .conftest import RECIPES

WALKED = ("train.sh", "eval.sh", "run_baselines.sh")
SKIPPED = ("prepare.sh", "binarize.sh")  # no DRY_RUN: their own tests run them on the fixture
# train.sh knobs that shape the batch or the devices: two spans that set some are never merged.
GEOMETRY = {"GPUS", "NNODES", "NODE_RANK", "UPDATE_FREQ", "TOKENS_PER_SAMPLE", "MAX_TOKENS", "BATCH_TOKENS", "SMOKE",
            "CPU_PROCS", "MAX_UPDATE", "WARMUP_UPDATES", "LR_PERIOD_UPDATES"}
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$", re.S)

Command = Tuple[str, Dict[str, str], str]  # (script, knobs, where the README says it)


def documented_knobs(script: str) -> set:
    """The knobs a script's header lists (``#   NAME [NAME...]  description``)."""
    knobs = set()
    for line in (RECIPES / script).read_text().splitlines():
        match = re.match(r"^#   ([A-Z][A-Z0-9_]*(?: [A-Z][A-Z0-9_]*)*)\s", line)
        if match:
            knobs.update(match.group(1).split())
    return knobs


def assignments(tokens: List[str]) -> Optional[Dict[str, str]]:
    found = {}
    for token in tokens:
        match = ASSIGNMENT.match(token)
        if not match:
            return None
        found[match.group(1)] = match.group(2)
    return found


def script_of(knobs: Dict[str, str]) -> Optional[str]:
    return next((s for s in WALKED + SKIPPED if set(knobs) <= documented_knobs(s)), None)


def code_commands(text: str) -> List[Command]:
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            match = re.match(r"^(.*?)\bbash (?:\S*/)?(\w+\.sh)\s*$", line)
            if match:
                knobs = assignments(shlex.split(match.group(1)))
                assert knobs is not None, f"not a recipe command: {line}"
                found.append((match.group(2), knobs, line))
    return found


def inline_spans(text: str) -> List[Command]:
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        try:
            tokens = shlex.split(span)
        except ValueError:
            continue
        script = None
        if len(tokens) >= 2 and tokens[-2] == "bash" and tokens[-1].endswith(".sh"):
            script, tokens = tokens[-1].split("/")[-1], tokens[:-2]
        knobs = assignments(tokens)
        if not tokens or knobs is None:
            continue
        found.append((script or script_of(knobs), knobs, f"`{span}`"))
    return found


def merged(commands: List[Command]) -> List[Command]:
    """Inline spans of one script joined while their knobs differ and at most one shapes the batch."""
    groups: List[Command] = []
    for script, knobs, where in commands:
        for i, (g_script, g_knobs, g_where) in enumerate(groups):
            if (g_script == script and not set(g_knobs) & set(knobs)
                    and not (set(g_knobs) & GEOMETRY and set(knobs) & GEOMETRY)):
                groups[i] = (script, {**g_knobs, **knobs}, f"{g_where} {where}")
                break
        else:
            groups.append((script, dict(knobs), where))
    return groups


def readme_commands(recipes_readme: str, *other_texts: str) -> List[Command]:
    """Every walked command: the code lines of all the texts as they are, the recipes README's inline spans
    merged (of the other texts, only spans that name a recipe script); duplicates once."""
    code = [c for text in (recipes_readme,) + other_texts for c in code_commands(text)]
    spans = inline_spans(recipes_readme) + [c for text in other_texts for c in inline_spans(text) if "bash " in c[2]]
    spans = list({(script, tuple(sorted(knobs.items()))): (script, knobs, where) for script, knobs, where in spans}.values())
    seen, result = set(), []
    for script, knobs, where in code + merged([c for c in spans if c[0] in WALKED]):
        if script not in WALKED:
            continue
        key = (script, tuple(sorted(knobs.items())))
        if key not in seen:
            seen.add(key)
            result.append((script, knobs, where))
    return result


def undocumented(recipes_readme: str) -> List[str]:
    """Inline knob spans that no recipe documents (a typo, or a knob that no longer exists)."""
    return [where for script, knobs, where in inline_spans(recipes_readme) if script is None]
