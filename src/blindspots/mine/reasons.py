"""Plain-language reasons: turn a sampler's JSON `reason` into one sentence for people.

e.g. MAD: "target and deeplab label 38% of pixels differently (ranked among the images where target
shows person)"; entropy: "target's mean per-pixel entropy is 0.412 nats"; random: "random pick
(seed 0)". Percentages round honestly: a share above 0 never reads "0%" (it reads "<1%").
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence


def _class(k: Any, names: Sequence[str] | None, given: str | None = None) -> str:
    if given:
        return str(given)
    if names is not None and isinstance(k, int) and 0 <= k < len(names):
        return str(names[k])
    return f"class {k}"


def percent(share: float) -> str:
    """A share in [0, 1] as a whole percentage that never hides a difference: 0.004 -> "<1%",
    0.996 -> ">99%", 0 -> "0%", 0.38 -> "38%"."""
    if share != share:  # NaN
        return "?%"
    if 0 < share < 0.01:
        return "<1%"
    if 0.99 < share < 1:
        return ">99%"
    return f"{share:.0%}"


def _mad(r: dict, names: Sequence[str] | None, shown_as: Mapping[str, str]) -> str:
    picks = r.get("picks") or []
    if not picks:
        return "MAD pick"
    best = max(picks, key=lambda p: (p.get("d", 0.0), -p.get("rank", 0)))
    target, comp, d = r.get("target", "target"), best.get("competitor", "?"), float(best.get("d", float("nan")))
    target, comp = shown_as.get(target, target), shown_as.get(comp, comp)
    cls = _class(best.get("class"), names, best.get("class_name"))
    # the class is not what went wrong: MAD ranks the images where one model's map shows it (at a usual size)
    by = comp if best.get("by") == "competitor" else target
    where = f"ranked among the images where {by} shows {cls}"
    if r.get("distance") == "dmiou":
        text = f"{target} vs {comp}: mIoU distance {d:.2f} (1 - mIoU of their maps; {where})"
    else:
        text = f"{target} and {comp} label {percent(d)} of pixels differently ({where})"
    others = {(p.get("competitor"), p.get("class")) for p in picks} - {(best.get("competitor"), best.get("class"))}
    return text + (f"; also picked for {len(others)} other competitor/class pair(s)" if others else "")


def describe(reason: str, class_names: Sequence[str] | None = None,
             shown_as: Mapping[str, str] | None = None) -> str:
    """One sentence for a sampler's `reason` (JSON); the text itself when it is not JSON.

    shown_as: model names as the reader knows them, e.g. {"ocr4_v0": "ocr4"} (a project's scan names
    each target version `<target>_v<i>`; a page about one round shows the target's own name)."""
    shown_as = dict(shown_as or {})
    try:
        r = json.loads(reason)
    except (TypeError, ValueError):
        return str(reason)
    if not isinstance(r, dict):
        return str(reason)
    if "picks" in r:
        return ("MAD part of MAD+: " if r.get("part") == "mad" else "") + _mad(r, class_names, shown_as)
    strategy, target = r.get("strategy"), r.get("target", "target")
    target = shown_as.get(target, target)
    if strategy == "entropy":
        return f"{target}'s mean per-pixel entropy is {float(r.get('value', float('nan'))):.3f} nats"
    if strategy == "maxprob":
        return f"{target}'s mean top-class probability is only {float(r.get('value', float('nan'))):.3f}"
    if strategy == "margin":
        return f"{target}'s top two classes are only {float(r.get('margin', float('nan'))):.3f} apart on average"
    if strategy in ("bald", "powerbald"):
        how = "" if strategy == "bald" else " (drawn by PowerBALD)"
        return f"{target}'s MC-dropout passes disagree: BALD {float(r.get('bald', float('nan'))):.4f} nats{how}"
    if strategy == "coreset":
        if r.get("distance") is None:
            return f"core-set: first pick, drawn at random (no labelled image yet; {target}'s features)"
        return (f"far from every labelled image in {target}'s features (distance "
                f"{float(r.get('distance', float('nan'))):.3f}; core-set)")
    if strategy == "badge":
        g = float(r.get("grad_norm", float("nan")))
        if r.get("distance") is None:
            return f"BADGE: first pick, the largest gradient embedding ({target}'s last-layer gradient norm {g:.3f})"
        return (f"BADGE: {target}'s last-layer gradient norm {g:.3f}, {float(r['distance']):.3f} from every "
                "earlier pick's gradient (drawn by k-means++)")
    if strategy == "madplus" and r.get("part") == "shared":
        sa = next((f"; {k.upper()} {float(r[k]):.3f}" for k in ("mdsa", "lsa", "dsa") if k in r), "")
        return (f"shared doubt (MAD+): the models agree (disagreement at most "
                f"{float(r.get('max_disagreement', r.get('max_miou_distance', float('nan')))):.0%}) but even the "
                f"surest is unsure (entropy {float(r.get('min_entropy', float('nan'))):.3f} nats){sa}")
    if strategy == "qbc":
        what = "vote entropy" if r.get("measure", "vote") == "vote" else "mean KL to the consensus"
        return f"the committee ({target} and its competitors) disagrees: {what} {float(r.get('value', float('nan'))):.3f} nats"
    if strategy == "portfolio":
        inner = r.get("pick")
        text = describe(json.dumps(inner), class_names, shown_as) if isinstance(inner, dict) else "pick"
        return f"proposed by {r.get('proposer')} ({percent(float(r.get('share', float('nan'))))} of M): {text}"
    if strategy == "random":
        return f"random pick (seed {r.get('seed')})"
    if strategy == "surprise":
        where = "" if r.get("class_id") is None else f" for {_class(r.get('class_id'), class_names)}"
        word = "surprise" if r.get("order", "high") == "high" else "surprise (least surprising first)"
        return f"{target}'s {str(r.get('kind', '')).upper()} {word}{where} is {float(r.get('sa', float('nan'))):.3f}"
    return str(reason)
