"""The one list of selection strategies: name -> sampler class.

`make_sampler("mad", target="t", n3=25)` builds the sampler with its settings (checked against
its constructor: an unknown setting is a ValueError naming it); `sampler_names()` lists the
names a project, the CLI or the app may offer. Add a strategy here and every caller sees it.
"""
from __future__ import annotations

import inspect
from typing import Any

from blindspots.mine.samplers.badge import BADGESampler
from blindspots.mine.samplers.bald import BALDSampler, PowerBALDSampler
from blindspots.mine.samplers.bandit import PRIOR
from blindspots.mine.samplers.base import Sampler
from blindspots.mine.samplers.coreset import CoreSetSampler
from blindspots.mine.samplers.entropy import EntropySampler
from blindspots.mine.samplers.mad import MADSampler
from blindspots.mine.samplers.madplus import MADPlusSampler
from blindspots.mine.samplers.margin import MarginSampler
from blindspots.mine.samplers.portfolio import PortfolioSampler
from blindspots.mine.samplers.qbc import QBCSampler
from blindspots.mine.samplers.random import RandomSampler
from blindspots.mine.samplers.scenario import ScenarioSampler
from blindspots.mine.samplers.surprise import SurpriseSampler

SAMPLERS: dict[str, type[Sampler]] = {
    "mad": MADSampler,  # the paper's MAD competition (default)
    "madplus": MADPlusSampler,  # MAD plus a share for failures every model shares (agree, but unsure/surprised)
    "entropy": EntropySampler,  # highest mean target entropy (paper Appendix A baseline)
    "margin": MarginSampler,  # smallest mean best-minus-second-best margin (Scheffer et al. 2001)
    "bald": BALDSampler,  # MC-dropout BALD (Houlsby et al. 2011; Gal et al. 2017)
    "powerbald": PowerBALDSampler,  # stochastic batch BALD (Kirsch et al. 2021)
    "coreset": CoreSetSampler,  # k-center greedy on pooled features (Sener & Savarese 2018)
    "badge": BADGESampler,  # k-means++ seeding on last-layer gradient embeddings (Ash et al. 2020)
    "qbc": QBCSampler,  # query by committee over target + competitors (Seung et al. 1992; McCallum & Nigam 1998)
    "portfolio": PortfolioSampler,  # rate broadly, label narrowly: M from several proposers, shares by EXP3
    "surprise": SurpriseSampler,  # surprise adequacy columns (Kim et al. 2023)
    "random": RandomSampler,  # uniform control
    "scenario": ScenarioSampler,  # pool images nearest confirmed failure scenarios (needs scenarios=)
}


def sampler_names() -> tuple[str, ...]:
    """The registered strategy names, in registry order ("mad" first)."""
    return tuple(SAMPLERS)


def needs_model(name: str) -> tuple[str, ...]:
    """The acquisition columns (`blindspots.mine.model_columns.acquisition.KINDS`) strategy `name` reads: computed
    with the model once per pool; () for strategies that read the scan's own columns."""
    _lookup(name)
    return MODEL_COLUMNS.get(name, ())


MODEL_COLUMNS: dict[str, tuple[str, ...]] = {"margin": ("margin",), "bald": ("bald",), "powerbald": ("bald",),
                                             "coreset": ("features",), "badge": ("badge",),
                                             "portfolio": ("margin", "features")}


def needs_committee(name: str) -> bool:
    """True when strategy `name` reads the committee columns (`mine.samplers.qbc`: every member runs over the pool):
    qbc, and the portfolio when its prior has a qbc proposer."""
    _lookup(name)
    return name == "qbc" or (name == "portfolio" and PRIOR.get("qbc", 0) > 0)


def sampler_settings(name: str) -> tuple[str, ...]:
    """The settings (constructor arguments) strategy `name` accepts."""
    cls = _lookup(name)
    params = inspect.signature(cls.__init__).parameters
    return tuple(p for p in params if p != "self" and params[p].kind not in (params[p].VAR_POSITIONAL,
                                                                                 params[p].VAR_KEYWORD))


def make_sampler(name: str, **settings: Any) -> Sampler:
    """A sampler of strategy `name` with `settings` (its constructor's keyword arguments).

    ValueError for an unknown name (listing the registered ones), a setting the strategy does
    not take (listing the ones it does) or a required setting left out (e.g. "scenario" needs
    scenarios=, the output of `blindspots.scenarios.segmentation.find_scenarios`).
    """
    cls = _lookup(name)
    allowed = sampler_settings(name)
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise ValueError(f"settings: expected settings of strategy {name!r} among {list(allowed)}, got {unknown}")
    params = inspect.signature(cls.__init__).parameters
    missing = [p for p in allowed if params[p].default is params[p].empty and p not in settings]
    if missing:
        raise ValueError(f"settings: strategy {name!r} needs {missing} (no default), got {sorted(settings)}")
    return cls(**settings)


def _lookup(name: str) -> type[Sampler]:
    if not isinstance(name, str) or name not in SAMPLERS:
        raise ValueError(f"strategy: expected one of {list(SAMPLERS)}, got {name!r}")
    return SAMPLERS[name]
