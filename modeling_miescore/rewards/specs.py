"""``--reward`` specs -> :class:`~.groups.EditorReward` objects, one registry of reward kinds.

A spec is ``KIND:ARGUMENT``; each kind is declared once in :data:`REWARD_KINDS` with its builder, the options it
takes, its syntax and its help (``miescore:CKPT``, ``spatialreward:CKPT``, ``spatialreward-api:MODEL@URL``,
``serve:URL[,URL...]``, :mod:`.backends`), and ``module:function`` is a plain ``fn(images, instructions, sources)
-> list[float]`` (a non-finite value or a non-number is a failed sample, a wrong length an error).

A **weighted sum** is ``W*SPEC + W*SPEC ...`` (``"0.7*miescore:ckpt + 0.3*my_pkg.rewards:redness"``; a term
starts at a ``+`` followed by ``NUMBER*``), or a list of terms (a Python list from a YAML config, a JSON/YAML list
string, or a ``.json`` / ``.yaml`` file holding one): each term ``{"reward": SPEC, "weight": W, ...options}``
(weight 1 when omitted; extra keys are that term's options) or a ``"W*SPEC"`` string.

Options (``build_reward(spec, **options)``): ``device`` and ``dtype`` go to every kind that loads a model; any
other option goes to the kinds that take it, so ``aggregation="min"`` in ``0.5*miescore:A + 0.5*spatialreward:B``
reaches SpatialReward only; an option no kind of the spec takes is an error.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

from ..utils.import_spec import import_attribute, import_callable
from .groups import EditGroup, GroupScores, checked_rewards, flat_samples, regroup, reward_range_of
from ..utils.suggestions import closest_name

__all__ = ["REWARD_KINDS", "RewardKind", "build_reward", "CallableReward", "parse_reward_terms", "CONTEXT_OPTIONS",
           "RUNTIME_REWARD_OPTIONS", "REMOTE_KINDS", "reward_identity", "reward_kinds", "reward_model_folders",
           "reward_spec_problem"]

CONTEXT_OPTIONS = ("device", "dtype")  # where a reward model runs; kinds that load none ignore them
# options that change where or how fast a reward is computed, not its values: not part of a run's identity
RUNTIME_REWARD_OPTIONS = ("device", "api_key_env", "timeout", "max_retries", "max_concurrency", "batch_size",
                          "max_samples_per_request", "replica_cooldown_s", "balance_slack", "max_answer_bytes")
# kinds whose argument says where the reward is served (the rest of it, if any, says what is served)
_SERVED_AT = {"serve": lambda argument: "(replicas)",
              "spatialreward-api": lambda argument: re.sub(r"@https?://.*$", "@(endpoint)", argument)}
# kinds computed by another process or machine (a call to them waits on the network, not on this process)
REMOTE_KINDS = frozenset(_SERVED_AT)


class CallableReward:
    """A plain ``fn(images, instructions, sources) -> list[float]`` as an :class:`EditorReward` (one call per
    batch of groups, the groups' edits flattened in order). A value that is not a finite real number (a bool,
    a string, NaN, 1e400) is a failed sample; so is one outside ``fn.reward_range = (low, high)`` when the
    function declares it."""

    def __init__(self, fn: Callable, name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")
        self.reward_range = reward_range_of(fn)

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        samples, _ = flat_samples(groups)
        images = [s["edited"] for s in samples]
        flat = checked_rewards(self.fn(images, [s["instruction"] for s in samples], [s["sources"] for s in samples]),
                               len(images), f"reward {self.name!r}", self.reward_range)
        return regroup(groups, flat.rewards, flat.failures)

    def close(self) -> None:
        close = getattr(self.fn, "close", None)
        if callable(close):
            close()


def _build_callable(argument: str, device=None, dtype=None) -> CallableReward:
    return CallableReward(import_callable(argument, "reward callable"), name=argument)


def _lazy(target: str) -> Callable:
    """A builder imported on first use (``".module:function"`` in this package), so building a callable reward
    does not import the model code."""

    def build(argument: str, **options):
        return import_attribute(target, __package__)(argument, **options)

    build.__qualname__ = build.__name__ = f"build[{target}]"
    return build


@dataclass(frozen=True)
class RewardKind:
    """One kind of reward: ``build(argument, **options)`` makes it; ``help`` is what ``--reward`` docs say;
    ``options``: the option names it takes besides :data:`CONTEXT_OPTIONS`; ``syntax``: how a spec writes it."""

    build: Callable
    help: str
    options: Tuple[str, ...] = ()
    syntax: str = ""


_CLIENT = ("api_key_env", "timeout", "max_retries")
REWARD_KINDS: Dict[str, RewardKind] = {
    "miescore": RewardKind(
        _lazy(".backends:build_miescore_reward"),
        "MIEScore in this process: overall / 100, or weights over VQ/IF/AP; each group's prefix runs once",
        ("weights", "scale", "batch_size", "reuse_prefix"), "miescore:CKPT"),
    "spatialreward": RewardKind(
        _lazy(".backends:build_spatialreward_reward"),
        "SpatialReward in this process (paper's weighted reward, or aggregation=min: the B.2.2 ablation)",
        ("aggregation", "batch_size"), "spatialreward:CKPT"),
    "spatialreward-api": RewardKind(
        _lazy(".backends:build_spatialreward_api_reward"),
        "SpatialReward behind an OpenAI-compatible endpoint (vllm serve)",
        ("aggregation", "batch_size", "max_concurrency", "config", *_CLIENT), "spatialreward-api:MODEL@URL"),
    "serve": RewardKind(
        _lazy(".backends:build_served_reward"),
        "miescore serve replicas over HTTP (MIEScore or SpatialReward), each group whole to one replica",
        ("weights", "scale", "aggregation", "max_samples_per_request", "replica_cooldown_s", "balance_slack",
         "max_answer_bytes", *_CLIENT), "serve:URL[,URL...]"),
    "callable": RewardKind(_build_callable, "module:function -> fn(images, instructions, sources) -> list[float]",
                           (), "package.module:function"),
}

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TERM_START = re.compile(rf"\s*\+\s*(?={_NUMBER}\s*\*)")
_TERM = re.compile(rf"^\s*({_NUMBER})\s*\*\s*(\S.*?)\s*$")


def _kind_of(spec: str) -> Tuple[str, str]:
    """``(kind, argument)`` of a single spec (``module:function`` without a known kind is a callable)."""
    kind, sep, argument = spec.strip().partition(":")
    if sep and kind in REWARD_KINDS:
        if not argument.strip():
            raise ValueError(f"reward {spec!r} names no {kind} argument; write {REWARD_KINDS[kind].syntax}")
        return kind, argument.strip()
    if spec.strip().startswith(("http://", "https://")):
        raise ValueError(f"reward {spec!r} is a URL; write serve:{spec.strip()} for `miescore serve` or "
                         "spatialreward-api:MODEL@URL for an OpenAI-compatible endpoint")
    if sep and argument and kind:
        _check_not_a_mistyped_kind(spec.strip(), kind.strip())
        return "callable", spec.strip()
    raise ValueError(f"unknown reward {spec!r}; use one of "
                     f"{', '.join(k.syntax for k in REWARD_KINDS.values())}, or a weighted sum W*SPEC + W*SPEC")


def _check_not_a_mistyped_kind(spec: str, kind: str) -> None:
    """``spatialreword:CKPT`` is not read as ``module:function``: a prefix that is no importable module and is
    close to a kind's name is reported with that kind."""
    import importlib.util


    if "." in kind or not kind.isidentifier() and "-" not in kind:
        return  # a dotted module path: a callable (import_callable reports it if it is not there)
    try:
        importable = importlib.util.find_spec(kind) is not None
    except (ImportError, ValueError):
        importable = False
    match = None if importable else closest_name(kind, REWARD_KINDS)
    if match is not None:
        raise ValueError(f"unknown reward kind {kind!r} in {spec!r}; did you mean {match}? "
                         f"({REWARD_KINDS[match].syntax})")


def parse_reward_terms(spec) -> List[Tuple[float, str, dict]]:
    """A spec -> its ``(weight, single spec, term options)`` terms; one term of weight 1 for a plain spec (see
    the module docstring for the forms)."""
    if isinstance(spec, (list, tuple)):
        return [_list_term(item, i) for i, item in enumerate(spec)]
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a reward spec must be a non-empty string or a list of terms, got {spec!r}")
    text = spec.strip()
    if text.startswith("[") or (text.endswith((".json", ".yaml", ".yml")) and os.path.isfile(text)):
        import yaml

        where = text if not text.startswith("[") else "the --reward list"
        try:
            loaded = yaml.safe_load(open(text, encoding="utf-8").read() if not text.startswith("[") else text)
        except yaml.YAMLError as error:
            raise ValueError(f"cannot read the reward terms in {where}: {error}") from None
        if not isinstance(loaded, list) or not loaded:
            raise ValueError(f"{where} must hold a non-empty list of reward terms")
        return parse_reward_terms(loaded)
    if _TERM.match(text):
        return [_weighted_term(part) for part in _TERM_START.split(text)]
    return [(1.0, text, {})]


def _weighted_term(text: str) -> Tuple[float, str, dict]:
    match = _TERM.match(text)
    if match is None:
        raise ValueError(f"reward term {text!r} must look like WEIGHT*SPEC, e.g. 0.5*miescore:path/to/ckpt")
    return float(match.group(1)), match.group(2), {}


def _list_term(item, index: int) -> Tuple[float, str, dict]:
    if isinstance(item, str):
        return _weighted_term(item) if _TERM.match(item) else (1.0, item.strip(), {})
    if not isinstance(item, dict) or not isinstance(item.get("reward"), str):
        raise ValueError(f"reward term {index} must be 'W*SPEC' or a mapping with a 'reward' spec, got {item!r}")
    options = {k: v for k, v in item.items() if k not in ("reward", "weight")}
    try:
        weight = float(item.get("weight", 1.0))
    except (TypeError, ValueError):
        raise ValueError(f"reward term {index}: weight {item.get('weight')!r} is not a number") from None
    return weight, item["reward"].strip(), options


def reward_identity(spec):
    """What a reward spec computes, without where it is served: ``serve:URL,URL`` -> ``serve:(replicas)``,
    ``spatialreward-api:M@URL`` -> ``spatialreward-api:M@(endpoint)``, weights and the other kinds kept (a run
    resumed with its replicas on other machines is the same run). A spec that cannot be parsed is returned as it is
    (building the reward reports it)."""
    try:
        terms = parse_reward_terms(spec)
        kinds = [_kind_of(single) for _, single, _ in terms]
    except ValueError:
        return spec
    parts = []
    for (weight, _, own), (kind, argument) in zip(terms, kinds):
        shown = f"{kind}:{_SERVED_AT[kind](argument)}" if kind in _SERVED_AT else (
            argument if kind == "callable" else f"{kind}:{argument}")
        own = {k: v for k, v in sorted(own.items()) if k not in RUNTIME_REWARD_OPTIONS}
        parts.append(f"{weight:g}*{shown}" + (f" {json.dumps(own, sort_keys=True, default=str)}" if own else ""))
    return parts[0].removeprefix("1*") if len(parts) == 1 else " + ".join(parts)


def reward_kinds(spec) -> List[str]:
    """The kind of each term of a spec (``["serve", "callable"]``); ``ValueError`` for a spec that cannot be
    parsed."""
    return [_kind_of(single)[0] for _, single, _ in parse_reward_terms(spec)]


def reward_model_folders(spec) -> Dict[str, str]:
    """``{label: folder}`` of the local checkpoints an in-process reward loads (``miescore:CKPT``,
    ``spatialreward:CKPT``), for the output-folder checks; nothing for a spec that cannot be parsed."""
    try:
        terms = parse_reward_terms(spec)
        kinds = [_kind_of(single) for _, single, _ in terms]
    except ValueError:
        return {}
    return {f"the reward checkpoint ({kind}:{argument})": argument for kind, argument in kinds
            if kind in ("miescore", "spatialreward") and os.path.exists(os.path.expanduser(argument))}


def _options_for(kind: str, options: dict) -> dict:
    accepted = set(REWARD_KINDS[kind].options) | set(CONTEXT_OPTIONS)
    return {k: v for k, v in options.items() if k in accepted}


def reward_spec_problem(spec, imports: bool = False) -> str | None:
    """What is wrong with a spec's syntax and kinds (a mistyped kind, a term without a weight...), found without
    building anything (the config checks it before the recipe builds or loads anything), or None. With
    ``imports``, also a ``module:function`` term whose module or function is not there and an in-process
    checkpoint that is neither a folder nor a Hub id (``miescore edit --select`` checks them before it makes the
    candidates)."""
    try:
        for _, single, _ in parse_reward_terms(spec):
            kind, argument = _kind_of(single)
            if imports and kind == "callable":
                import_callable(argument, "reward callable", error=ValueError)
            elif imports and kind in ("miescore", "spatialreward"):
                _check_checkpoint(kind, argument)
    except ValueError as error:
        return str(error)
    return None


def _check_checkpoint(kind: str, argument: str) -> None:
    """``ValueError`` unless ``argument`` is a local path that exists or a valid Hub repository id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if os.path.exists(os.path.expanduser(argument)):
        return
    try:
        validate_repo_id(argument)
    except HFValidationError:
        raise ValueError(f"reward {kind}:{argument}: no checkpoint folder {argument!r} (and it is no Hub "
                         "repository id); pass the folder of a checkpoint or a Hub id") from None


def build_reward(spec, **options):
    """The reward a ``--reward`` spec names (see the module docstring): one reward, or a
    :class:`~.backends.WeightedSumReward` when the spec has weights or several terms."""
    terms = parse_reward_terms(spec)
    kinds = [_kind_of(single) for _, single, _ in terms]
    for (kind, _), (_, single, own) in zip(kinds, terms):
        unknown = sorted(set(own) - set(REWARD_KINDS[kind].options) - set(CONTEXT_OPTIONS))
        if unknown:
            raise ValueError(f"reward {single!r} ({kind}) takes no option {', '.join(unknown)}; it takes "
                             f"{', '.join(REWARD_KINDS[kind].options + CONTEXT_OPTIONS)}")
    used = set(CONTEXT_OPTIONS).union(*(REWARD_KINDS[kind].options for kind, _ in kinds))
    unknown = sorted(set(options) - used)
    if unknown:
        raise ValueError(f"reward option {', '.join(unknown)} is taken by no reward of {spec!r}; "
                         + "; ".join(f"{k} takes {', '.join(REWARD_KINDS[k].options) or 'none'}"
                                     for k in dict.fromkeys(kind for kind, _ in kinds)))
    from .backends import WeightedSumReward  # deferred: loads torch, transformers

    rewards = []
    try:
        for (kind, argument), (weight, single, own) in zip(kinds, terms):
            if not math.isfinite(weight):
                raise ValueError(f"reward weight {weight} of {single!r} is not finite")
            rewards.append((weight, REWARD_KINDS[kind].build(argument, **_options_for(kind, {**options, **own}))))
        if len(rewards) == 1 and terms[0][0] == 1.0:
            return rewards[0][1]
        return WeightedSumReward(rewards)
    except BaseException:
        for _, reward in rewards:  # nothing half-built stays open
            reward.close()
        raise
