"""A model of a Ray scan on N nodes, from what the 1- and 2-node clusters measured (`benchmarks/scan.py --ray`).

Measured (medians of the rounds):
- F1, F2: the fixed cost of a scan on 1 and 2 nodes: connect, plan, the pipeline's start-up (worker
  processes, actors importing torch and loading the models, the first batch), disconnect;
- q1 = P / rest1: images/s of 1 node after start-up; q2 = P / rest2 / 2: images/s per node of 2 nodes
  after start-up (so the cost of spreading a pipeline over nodes is in it);
- d: the driver's CPU seconds per image during the Ray scan (it receives every result and writes
  every shard and map): the driver alone cannot take more than D = 1 / d images/s.

Projected for N >= 2 nodes (nodes like these, each with its own cores): rate R(N) = min(N q2, D);
start-up F(N) = F2 (the actors start in parallel, one set per node; F2 measured here is inflated by
the two nodes sharing two cores, so this errs on the slow side); a pool of P images takes
T(N, P) = F(N) + P / R(N), against T(1, P) = F1 + P / q1. Speed-up S(N, P) = T(1, P) / T(N, P); the
start-up is 5% of the scan from P5(N) = 19 F(N) R(N) images on.
"""
from __future__ import annotations

from dataclasses import dataclass

NODES = (1, 2, 4, 8, 16, 32, 64)
POOLS = (10_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class RayModel:
    """Fixed costs f1, f2 (s), rates after start-up q1 (1 node), q2 (per node of 2), images/s; driver_cap D."""

    f1: float
    f2: float
    q1: float
    q2: float
    driver_cap: float

    @classmethod
    def measured(cls, f1: float, f2: float, rest1: float, rest2: float, images: int,
                 driver_cpu_per_image: float) -> "RayModel":
        cap = 1.0 / driver_cpu_per_image if driver_cpu_per_image > 0 else float("inf")
        return cls(f1, f2, images / rest1, images / rest2 / 2, cap)

    def rate(self, nodes: int) -> float:
        """images/s after start-up on `nodes` nodes."""
        return self.q1 if nodes == 1 else min(nodes * self.q2, self.driver_cap)

    def startup(self, nodes: int) -> float:
        return self.f1 if nodes == 1 else self.f2

    def seconds(self, nodes: int, pool: int) -> float:
        return self.startup(nodes) + pool / self.rate(nodes)

    def speedup(self, nodes: int, pool: int) -> float:
        return self.seconds(1, pool) / self.seconds(nodes, pool)

    def pool_at_5_percent(self, nodes: int) -> float:
        """The pool size from which the start-up is 5% of the scan."""
        return 19 * self.startup(nodes) * self.rate(nodes)

    def lines(self) -> list[str]:
        """The projection as printable lines (a table of N nodes by pool size)."""
        out = [f"Ray model (from the 1- and 2-node medians above): start-up F1 {self.f1:.1f} s, F2 {self.f2:.1f} s; "
               f"after start-up {self.q1:.1f} images/s on 1 node, {self.q2:.1f} per node on 2 (efficiency "
               f"{self.q2 / self.q1:.2f}); the driver's CPU caps the rate at {self.driver_cap:,.0f} images/s",
               "  nodes | rate after start-up | speed-up over 1 node at " + " | ".join(f"{p:,}" for p in POOLS)
               + " images | start-up is 5% from"]
        for n in NODES:
            cells = " | ".join(f"{self.speedup(n, p):6.2f}" for p in POOLS)
            out.append(f"  {n:5d} | {self.rate(n):9.1f} images/s | {cells} | {self.pool_at_5_percent(n):,.0f} images")
        if self.driver_cap < NODES[-1] * self.q2:
            out.append(f"  (from {self.driver_cap / self.q2:.0f} nodes on the driver is the limit: it receives "
                       f"every result and writes every shard and map)")
        return out
