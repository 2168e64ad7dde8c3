"""Open a finished project and print its failure scenarios with their descriptions.

The confirmed failures are every round's S (the lowest-MOS candidates, labelled by people); the
features are simple image attributes of the pool plus the target's predicted class mix and object
sizes (`scan_attributes`); `find_scenarios` groups the failures with Defuse's DP-GMM and names each
group by the attributes that set it apart (Cohen's d against the rest of the pool).

    .venv/bin/python examples/scenarios.py PROJECT_DIR
"""
from __future__ import annotations

import sys

from blindspots.loop.project import Project
from blindspots.scenarios.segmentation import find_scenarios
from blindspots.scenarios.segmentation_attributes import scan_attributes


def main(path: str) -> None:
    project = Project.open(path)
    rounds = range(project.config.project.rounds + 1)
    failures = sorted({str(i) for r in rounds for i in project.answers.candidates(r, "S")["id"]})
    if len(failures) < 2:
        sys.exit(f"{path}: fewer than 2 confirmed failures (S) so far; run more of the loop first")
    features = scan_attributes(project.scan_dir, progress=True)
    failures = [i for i in failures if i in features.index]
    found = find_scenarios(features, failures, random_state=project.config.project.seed)
    print(f"{len(failures)} confirmed failures -> {len(found)} scenario(s)")
    for s in found.summaries:
        print(f"\nscenario {s.index}: {len(s.members)} failures")
        print(f"  sets it apart: {s.description}")
        print(f"  most typical: {', '.join(s.typical)}")
    print(f"\nnext: blindspots report {path} --scenarios     # the same scenarios on the round page, as a vote set")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
