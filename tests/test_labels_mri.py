"""The mricron MRI slices as a labelled segmentation set."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blindspots.data.mri import DEFAULT_ROOT, MRI_CLASSES, load_mri_slices


def test_missing_package_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="mricron-data"):
        load_mri_slices(tmp_path)


@pytest.mark.skipif(not (Path(DEFAULT_ROOT) / "aal.nii.gz").is_file(),
                    reason="Debian package mricron-data not installed (apt-get install -y mricron-data)")
def test_slices_and_coarse_classes():
    images, masks, classes = load_mri_slices(size=48, step=10)
    assert classes is MRI_CLASSES and classes.num_classes == 8
    assert images.dtype == np.uint8 and images.shape[1:] == (48, 48, 3) and masks.shape == images.shape[:3]
    assert 10 <= len(images) <= 20
    assert masks.max() < classes.num_classes
    present = np.unique(masks)
    assert {0, 1, 2}.issubset(present) and len(present) >= 6
    # the image is brighter inside the brain than outside
    assert images[..., 0][masks > 0].mean() > images[..., 0][masks == 0].mean() + 20
    with pytest.raises(ValueError, match="size"):
        load_mri_slices(size=4)
