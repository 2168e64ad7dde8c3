"""FiftyOne plugin: the operator "mine with blindspots" (`@blindspots/mine/mine_with_blindspots`).

It runs `blindspots.integrations.fiftyone.mining.mine_view` on the App's current view of a dataset
that `blindspots fiftyone` exported, and tags the picks "mined:<strategy>". FiftyOne finds it through
its plugins folder: link this folder there (docs/annotation_tools.md, "The plugin").
"""
import fiftyone.operators as foo
import fiftyone.operators.types as types

from blindspots.integrations.fiftyone.mining import mine_view

STRATEGIES = ("mad", "entropy", "random")


class MineWithBlindspots(foo.Operator):
    @property
    def config(self):
        return foo.OperatorConfig(name="mine_with_blindspots", label="Mine with blindspots",
                                  description="Pick the images of the current view most likely to be the target's "
                                              "failures and tag them mined:<strategy>")

    def resolve_input(self, ctx):
        inputs = types.Object()
        inputs.enum("strategy", list(STRATEGIES), default="mad", label="Strategy",
                    description="mad: target vs competitors (the paper); entropy; random (the control)")
        inputs.int("n", default=20, min=1, label="How many images")
        inputs.int("seed", default=0, label="Seed (random)")
        return types.Property(inputs)

    def execute(self, ctx):
        strategy = ctx.params.get("strategy", "mad")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy: expected one of {list(STRATEGIES)}, got {strategy!r}")
        picks = mine_view(ctx.target_view(), strategy, int(ctx.params.get("n", 20)), seed=int(ctx.params.get("seed", 0)))
        ctx.ops.reload_dataset()
        return {"picked": len(picks), "tag": f"mined:{strategy}", "ids": picks["id"].tolist()}

    def resolve_output(self, ctx):
        outputs = types.Object()
        outputs.int("picked", label="Images picked")
        outputs.str("tag", label="Tag")
        return types.Property(outputs)


def register(p):
    p.register(MineWithBlindspots)
