"""Step ``finetune``: f_t^(i+1) = f_t^(i) fine-tuned on S(1..i+1) ∪ S0, LR chosen on T0
(`blindspots.training.replay`). Skipped in the last round.
"""
from __future__ import annotations

from typing import Any

from blindspots.loop.context import LoopContext
from blindspots.loop.maps import round_pairs
from blindspots.loop.models import use_import_dir
from blindspots.loop.steps.base import Step
from blindspots.models.spec_syntax import spec_kind

# Lazy imports: torch (training, checkpoints), which only this step needs.

__all__ = ["FinetuneStep", "target_kind"]

#: FinetuneSettings fields recorded as the step's settings
_RECORDED = ("lrs", "epochs", "batch_size", "momentum", "weight_decay", "power", "image_size", "max_replay",
             "device")


class FinetuneStep(Step):
    """Fine-tunes the target and registers it as version i+1 (a zoo checkpoint, a factory's weights
    or a Hugging Face folder, as its spec loads back)."""

    name = "finetune"

    def settings(self, ctx: LoopContext) -> dict:
        return {k: getattr(ctx.cfg.finetune, k) for k in _RECORDED}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict:
        from blindspots.models.zoo import load_checkpoint, save_checkpoint
        from blindspots.training.replay import ReplayFinetuner

        p, c = ctx.project, ctx.cfg
        if i >= ctx.last_round():
            return {"skipped": "last round: evaluation only"}
        f = c.finetune
        rec = p.registry.model(c.target.name, i)
        kind = target_kind(rec.spec, rec.meta.get("import_dir"))
        adapter: dict[str, Any] = {}
        if kind == "zoo":  # unchanged since the paper's runs: the zoo checkpoint's module, default preprocessing
            module, info = load_checkpoint(rec.path)
        else:  # module:factory or Hugging Face: the adapter's plain nn.Module, with its own preprocessing
            seg = ctx.segmenter(c.target.name, i)
            module = seg.module
            adapter = {"preprocess": seg.preprocess, "output_key": seg.output_key}
        s = round_pairs(ctx, i, "S", range(i + 1))
        ft = ReplayFinetuner(f.lrs, epochs=f.epochs, batch_size=f.batch_size, momentum=f.momentum,
                             weight_decay=f.weight_decay, power=f.power, max_replay=f.max_replay,
                             image_size=f.image_size, seed=seed, work_dir=p.checkpoints_dir / f"finetune-r{i}",
                             device=f.device, ignore_index=ctx.classes.ignore_index, progress=ctx.progress,
                             **adapter)
        ft.fit(module, s, ctx.labelled_set("train"), ctx.labelled_set("val"), num_classes=ctx.classes.num_classes)
        path = p.checkpoints_dir / f"{c.target.name}-v{i + 1}.pt"
        meta = {"round": i, "parent_version": i, "lr": ft.lr_, "val_miou": ft.val_miou_, "n_S": len(s),
                "grid": [{"lr": r.lr, "val_miou": r.val_miou, "losses": r.losses} for r in ft.runs_], "seed": seed}
        if kind == "zoo":
            save_checkpoint(path, ft.model_, arch=info["arch"], classes=ctx.classes, meta=meta)
            p.registry.register_model(c.target.name, i + 1, "target", path, round=i, meta=meta)
        else:
            from blindspots.loop.versions import save_finetuned

            spec = save_finetuned(kind, rec.spec, ft.model_, p.checkpoints_dir / f"{c.target.name}-v{i + 1}")
            path = spec  # type: ignore[assignment]  # reported as the new version's spec
            meta["import_dir"] = rec.meta.get("import_dir")  # a factory imports from where `init` ran
            p.registry.register_model(c.target.name, i + 1, "target", spec, round=i, meta=meta)
        p.registry.set_metric(c.target.name, i + 1, "T0", ft.val_miou_, len(ctx.labelled_set("val")))
        return {"version": i + 1, "path": str(path), "lr": ft.lr_, "val_miou": ft.val_miou_, "n_S": len(s)}


def target_kind(spec: str, import_dir: str | None) -> str:
    """The spec kind of a target version ("zoo", "factory", "hf", ...), loading no weights."""
    use_import_dir(spec, import_dir)
    return spec_kind(spec)
