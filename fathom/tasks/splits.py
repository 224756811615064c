"""Pinned split manifests: ids, parameters and SHA-256 per task, never the contexts.

Contexts regenerate deterministically from ids. A manifest records what its haystack came
from; on a machine whose haystack differs (another Python patch version), verification
checks the haystack-independent gold digest instead of the full digest.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from fathom.tasks import haystack
from fathom.tasks.generate import FAMILIES, generate, get_task
from fathom.tasks.record import GENERATOR_VERSION, SEED_BLOCK, SPLITS, length_tag, split_of_seed

SPLITS_DIR = Path(__file__).resolve().parent / "splits"

# Lengths per split as (length, weight). Test stays moderate because the env server runs all of
# it through real servers; heldout carries the multi-million-character tasks.
LENGTHS: dict[str, list[tuple[int, int]]] = {
    "train": [(2**k, 1) for k in range(10, 18)],
    "test": [(2**k, 4) for k in range(10, 19)] + [(2**20, 1)],
    "heldout": [(2**k, 2) for k in range(10, 21)] + [(2**21, 1), (2**22, 1), (2**23, 1), (10 * 2**20, 1)],
}
FIRST_BLOCK = {"train": 1000, "test": 150, "heldout": 200}
"""Each split's first tasks, round-robin over the first FIRST_FAMILIES families and pinned before any family was
added: they stay exactly as they were, so figures on them stay comparable across versions."""
FIRST_FAMILIES = 5
DEFAULT_N = {"train": 1200, "test": 180, "heldout": 240}
"""Past its first block a split holds the families added since, round-robin, on the seeds that follow."""


class ManifestError(ValueError):
    """A manifest that is missing, malformed or does not match regenerated tasks."""


def plan(split: str, n: int) -> list[tuple[str, int, int]]:
    """(family, seed, length) for `n` tasks: lengths drawn by weight, seeds in the split's block; families round-robin,
    the first five over the split's FIRST_BLOCK, the families added later over the tasks after it."""
    if split not in SPLITS:
        raise ManifestError(f"split {split!r} is unknown; choose one of {', '.join(SPLITS)}")
    if not 0 < n <= SEED_BLOCK:
        raise ManifestError(f"--n {n} must be between 1 and {SEED_BLOCK}")
    rng = random.Random(f"fathom/plan/{split}")
    lengths, weights = zip(*LENGTHS[split])
    base = SPLITS.index(split) * SEED_BLOCK
    out = []
    first, later = FAMILIES[:FIRST_FAMILIES], FAMILIES[FIRST_FAMILIES:]
    for i in range(n):
        length = rng.choices(lengths, weights)[0]
        j = i - FIRST_BLOCK[split]
        family = first[i % len(first)] if j < 0 or not later else later[j % len(later)]
        out.append((family, base + i, length))
    return out


def rounds(split: str, ids: list[str], n: int | None = None) -> list[str]:
    """A manifest's ids in rounds: the first block's tasks five at a time (one per first family), each round followed
    by the next task of each family added later. With `n`, only the first block's first `n` tasks and the rounds they
    fill, so the first-n tasks that earlier figures were scored on stay in, and each later family joins in proportion
    (heldout, n = 100: 20 rounds, 100 + 20 tasks). A manifest no longer than its first block keeps its order, and an
    imported split (no first block) is its first `n` tasks."""
    if split not in FIRST_BLOCK:
        return ids if n is None else ids[:n]
    first = FIRST_BLOCK[split]
    head, tail = ids[:first], ids[first:]
    k = max(len(FAMILIES) - FIRST_FAMILIES, 1)
    n_head = len(head) if n is None else min(n, len(head))
    out: list[str] = []
    for r in range(-(-n_head // FIRST_FAMILIES)):
        out += head[r * FIRST_FAMILIES:min((r + 1) * FIRST_FAMILIES, n_head)]
        out += tail[r * k:(r + 1) * k]
    return out


def build(split: str, n: int | None = None, *, progress: Any = None) -> dict[str, Any]:
    """Generate the split's tasks and return its manifest (not written)."""
    if split not in SPLITS:
        raise ManifestError(f"split {split!r} is unknown; choose one of {', '.join(SPLITS)}")
    n = n or DEFAULT_N[split]
    rows = []
    for family, seed, length in plan(split, n):
        t = generate(family, seed, length)
        if split_of_seed(seed) != split:
            raise AssertionError(f"seed {seed} planned for {split} belongs to {split_of_seed(seed)}")
        rows.append({"id": t.id, "family": family, "seed": seed, "length": length,
                     "difficulty": t.metadata.difficulty, "template": t.metadata.template,
                     "sha256": t.digest(), "gold_sha256": t.gold_digest()})
        if progress:
            progress(len(rows), n, t.id)
    return {"split": split, "generator_version": GENERATOR_VERSION,
            "haystack": haystack.corpus().describe(), "n": len(rows), "tasks": rows}


_settings: dict[str, Any] = {"manifest_dir": "", "verify_on_load": False}


def configure(cfg: Any) -> None:
    """Apply a `TasksConfig`: haystack kind, manifest directory, verification on load."""
    from fathom.tasks import store

    haystack.set_default(None if cfg.haystack == "auto" else cfg.haystack)
    _settings.update(manifest_dir=cfg.manifest_dir, verify_on_load=cfg.verify_on_load)
    store.set_root(cfg.store_dir)


def manifest_path(split: str, directory: str | Path | None = None) -> Path:
    return Path(directory or _settings["manifest_dir"] or SPLITS_DIR) / f"{split}.json"


def render(manifest: dict[str, Any]) -> str:
    """A manifest as text: one task per line keeps the pinned files diffable and small."""
    head = {k: v for k, v in manifest.items() if k != "tasks"}
    body = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in manifest["tasks"])
    return json.dumps(head, indent=1)[:-2] + ',\n "tasks": [\n' + body + "\n ]\n}\n"


def write(manifest: dict[str, Any], directory: str | Path | None = None) -> Path:
    path = manifest_path(manifest["split"], directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(manifest))
    return path


def read(split: str, directory: str | Path | None = None) -> dict[str, Any]:
    path = manifest_path(split, directory)
    if split not in SPLITS:
        raise ManifestError(f"split {split!r} is unknown; choose one of {', '.join(SPLITS)}")
    if not path.is_file():
        raise ManifestError(f"manifest {str(path)!r} does not exist; run `fathom tasks build --split {split}`")
    try:
        data = json.loads(path.read_text())
        assert isinstance(data["tasks"], list) and data["split"] == split
    except (ValueError, KeyError, AssertionError) as e:
        raise ManifestError(f"manifest {str(path)!r} is malformed ({e!r}); rebuild it with "
                            f"`fathom tasks build --split {split}`") from None
    return data


def verify(manifest: dict[str, Any]) -> dict[str, int]:
    """Regenerate every task and compare digests; raises ManifestError on the first mismatch."""
    same_hay = manifest.get("haystack", {}).get("sha256") == haystack.corpus().sha256
    if manifest.get("generator_version") != GENERATOR_VERSION:
        raise ManifestError(f"manifest of split {manifest['split']!r} was built by generator version "
                            f"{manifest.get('generator_version')!r}, this is {GENERATOR_VERSION}; rebuild it")
    checked = 0
    for row in manifest["tasks"]:
        t = get_task(row["id"])
        got, want = (t.digest(), row["sha256"]) if same_hay else (t.gold_digest(), row["gold_sha256"])
        if got != want:
            raise ManifestError(f"task {row['id']} of split {manifest['split']!r} regenerated differently "
                                f"({'full' if same_hay else 'gold'} sha256 {got[:12]} != {want[:12]})")
        checked += 1
    return {"checked": checked, "full_digest": int(same_hay)}


def load_split(name: str, *, verify_sha: bool | None = None, directory: str | Path | None = None) -> list[str]:
    """Task ids of a pinned split, built-in or imported (`fathom tasks import`); with verify_sha (default:
    tasks.verify_on_load), check each SHA-256."""
    if name not in SPLITS:
        from fathom.tasks import store

        if not store.has(name):
            raise ManifestError(f"split {name!r} is unknown: neither built in ({', '.join(SPLITS)}) nor imported into "
                                f"{str(store.root())!r}; import it with `fathom tasks import {name}`")
        if verify_sha or (verify_sha is None and _settings["verify_on_load"]):
            store.verify(name)
        return store.load_split(name)
    data = read(name, directory)
    if verify_sha or (verify_sha is None and _settings["verify_on_load"]):
        verify(data)
    return [row["id"] for row in data["tasks"]]


def stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by family, by length tag, and by both."""
    by_family = Counter(r["family"] for r in rows)
    by_length = Counter(length_tag(r["length"]) for r in sorted(rows, key=lambda r: r["length"]))
    grid: dict[str, dict[str, int]] = {}
    for r in sorted(rows, key=lambda r: r["length"]):
        grid.setdefault(r["family"], {}).setdefault(length_tag(r["length"]), 0)
        grid[r["family"]][length_tag(r["length"])] += 1
    return {"n": len(rows), "by_family": dict(sorted(by_family.items())), "by_length": dict(by_length),
            "by_family_length": dict(sorted(grid.items())), "chars": sum(r["length"] for r in rows)}
