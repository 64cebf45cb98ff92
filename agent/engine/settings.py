"""Speculation settings and the one builder that turns them into a `Speculator`.

`SpecSettings` names what decides how a session speculates (mode, drafter kind, K, the draft
model's confidence and head, trees); its field names and defaults are the config keys of the
same names, so `SpecSettings.from_config(cfg)` reads them off any object that has them.
`make_speculator` checks the pairing and builds the drafter, the policy and the tree budget.
This module does not load models or read the config file: the caller passes loaded models.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable

from ..choices import CHOICES, RANGES
from .errors import SettingsError

if TYPE_CHECKING:
    from .loading import LoadedModel
    from .speculative import Speculator
    from .suffix import SuffixIndex


@dataclass(frozen=True)
class SpecSettings:
    speculation: str = "auto"  # auto: measured, off when slower than plain | on | off
    drafter: str = "auto"  # auto (combined with a draft model, else lookup) | model | lookup | combined
    num_draft_tokens: int = 0  # 0 = K set by the draft's confidence (or adaptive), else pinned
    draft_confidence: float = 0.5  # a draft model stops a round below this joint confidence
    draft_vocab: int = 32768  # draft head over the first N ids + ids seen; 0 = full head
    tree: str = "off"  # off | auto (token trees where they measure faster than chains)
    tree_nodes: int = 32  # at most this many draft nodes per tree
    memory_headroom_gb: float = 8.0  # warn when target + draft leave less memory than this

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in CHOICES and value not in CHOICES[f.name]:
                raise SettingsError(f"{f.name} must be one of {', '.join(CHOICES[f.name])}, got {value!r}")
            ok, must = RANGES.get(f.name, (lambda v: True, ""))
            if not ok(value):
                raise SettingsError(f"{f.name} must be {must}, got {value!r}")

    @classmethod
    def from_config(cls, cfg: Any) -> SpecSettings:
        """The settings from an object with attributes of the same names (agent.config.Config)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


def make_speculator(settings: SpecSettings, target: LoadedModel, draft: LoadedModel | None = None, *,
                    warn: Callable[[str], None] | None = None,
                    suffix: SuffixIndex | None = None) -> Speculator | None:
    """The `Speculator` that `settings` ask for over `target` (with `draft` for the model and
    combined drafters; `suffix`: earlier replies for prompt lookup), or None for plain decoding.
    Raises `SettingsError` for a model drafter without `draft`, `PairingError` for a draft
    with another tokenizer; what only may go wrong (memory) goes to `warn`."""
    from .cache import ModelCache
    from .drafters import Combined, DraftModel, PromptLookup
    from .pairing import check_tokenizers, pairing_warnings
    from .speculative import SpecPolicy, Speculator
    from .tree import TreeBudget

    say = warn or (lambda m: print(f"spec-agent: warning: {m}", file=sys.stderr))
    if settings.speculation == "off":
        return None
    for lm in (target, draft):
        if lm is not None and not ModelCache(lm).rewindable:
            say(f"speculation off: {lm.name}'s cache cannot drop rejected tokens "
                "(sliding-window or recurrent layers)")
            return None
    kind = settings.drafter
    if kind == "auto":
        kind = "combined" if draft is not None else "lookup"
    if kind in ("model", "combined") and draft is None:
        raise SettingsError(f"drafter '{kind}' needs --draft-model")
    if draft is not None:
        check_tokenizers(target, draft)
        limit = int(getattr(target.model.args, "max_position_embeddings", 0) or 4096)
        for w in pairing_warnings(target, draft, limit, settings.memory_headroom_gb):
            say(w)
    if kind != "lookup":
        # Same tokenizer, but embedding tables may be padded to different widths.
        model = DraftModel(draft, settings.draft_confidence, min(target.vocab_size, draft.vocab_size),
                           settings.draft_vocab, target.vocab_size)
    # A pinned K caps lookup's runs too.
    lookup = PromptLookup(max_k=settings.num_draft_tokens or 16, suffix=suffix)
    drafter = lookup if kind == "lookup" else model if kind == "model" else Combined(model, lookup)
    policy = SpecPolicy(mode=settings.speculation, fixed_k=settings.num_draft_tokens)
    tree = TreeBudget(cap=settings.tree_nodes) if settings.tree == "auto" else None
    return Speculator(drafter, policy, tree)
