"""FiftyOne: a scan or a project as a FiftyOne dataset to look at (scores as fields, predictions
as `fo.Segmentation`, disagreement and label-issue maps as `fo.Heatmap`, selections as tags).

FiftyOne is an optional extra (`pip install 'blindspots[fiftyone]'`); it is imported only when a
dataset is written or read. samples.py and project.py build the sample rows without it,
dataset.py writes them, export.py is the one call; mining.py mines a view (the
plugin/ operator "mine with blindspots" calls it).
"""
from pathlib import Path

from blindspots.integrations.fiftyone.dataset import OWN_TAGS, import_fiftyone, write_dataset
from blindspots.integrations.fiftyone.export import export_samples, export_to_fiftyone, is_project
from blindspots.integrations.fiftyone.mining import mine_view, scan_of
from blindspots.integrations.fiftyone.project import newest_target, project_samples
from blindspots.integrations.fiftyone.samples import ID_FIELD, SampleTable, scan_samples


def plugin_dir() -> Path:
    """The folder of the FiftyOne plugin "mine with blindspots" (link it into FiftyOne's plugins folder)."""
    return Path(__file__).resolve().parent / "plugin"


__all__ = ["ID_FIELD", "OWN_TAGS", "SampleTable", "export_samples", "export_to_fiftyone", "import_fiftyone",
           "is_project", "mine_view", "newest_target", "plugin_dir", "project_samples", "scan_of", "scan_samples",
           "write_dataset"]
