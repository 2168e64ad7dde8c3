"""Label Studio labelling configs (XML) generated from the classes, and reading one back.

One generator for every path into Label Studio (`export`, the live `blindspots labelstudio` commands):
- `labeling_config(classes)`: an Image with a brush tool and a polygon tool, one label per class in
  the classes' colours; pixels are painted by brush strokes and filled polygons alike.
- `rating_config()`: an Image, the target's prediction shown as brush regions, and one choice among
  "1".."5" and "out-of-domain" (the ACR scale of the MAD rating step).
- `read_config(xml)`: the tag names and label values a project's config holds (to check that a project
  is one of ours and that every class is a label before pushing or pulling).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from xml.etree import ElementTree
from xml.sax.saxutils import quoteattr

import numpy as np

from blindspots.data.classes import Classes

#: the rating project's choices; "out-of-domain" is stored as the rating "ood"
RATING_CHOICES = ("1", "2", "3", "4", "5", "out-of-domain")
#: tag names of the generated configs
BRUSH_NAME, POLYGON_NAME, IMAGE_NAME, RATING_NAME = "tag", "poly", "image", "rating"


def _hex(c: np.ndarray) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(x) for x in c))


def _labels(classes: Classes, indent: str) -> str:
    return "\n".join(f"{indent}<Label value={quoteattr(n)} background={quoteattr(_hex(classes.palette[k]))}/>"
                     for k, n in enumerate(classes.names))


def labeling_config(classes: Classes, *, from_name: str = BRUSH_NAME, to_name: str = IMAGE_NAME,
                    polygon_name: str | None = POLYGON_NAME) -> str:
    """Label Studio labelling config: brush labels (and, unless polygon_name is None, polygon labels)
    with one label per class, named and coloured as in `classes`."""
    parts = [f"<View>\n  <Image name={quoteattr(to_name)} value=\"$image\" zoom=\"true\"/>",
             f"  <BrushLabels name={quoteattr(from_name)} toName={quoteattr(to_name)}>\n"
             f"{_labels(classes, '    ')}\n  </BrushLabels>"]
    if polygon_name is not None:
        parts.append(f"  <PolygonLabels name={quoteattr(polygon_name)} toName={quoteattr(to_name)} "
                     f"strokeWidth=\"2\" pointSize=\"small\" opacity=\"0.6\">\n{_labels(classes, '    ')}\n"
                     "  </PolygonLabels>")
    return "\n".join(parts) + "\n</View>\n"


def rating_config(classes: Classes, *, to_name: str = IMAGE_NAME, from_name: str = RATING_NAME,
                  brush_name: str = BRUSH_NAME) -> str:
    """Label Studio config for rating the target on M: the image, its prediction as brush regions
    (a pre-annotation to look at) and one required choice of RATING_CHOICES."""
    choices = "\n".join(f"    <Choice value={quoteattr(c)}/>" for c in RATING_CHOICES)
    return (f"<View>\n  <Image name={quoteattr(to_name)} value=\"$image\" zoom=\"true\"/>\n"
            f"  <BrushLabels name={quoteattr(brush_name)} toName={quoteattr(to_name)}>\n"
            f"{_labels(classes, '    ')}\n  </BrushLabels>\n"
            "  <Header value=\"How well does the model segment this image? 1 = bad, 5 = excellent; "
            "out-of-domain if the image is not one the model is meant for\"/>\n"
            f"  <Choices name={quoteattr(from_name)} toName={quoteattr(to_name)} choice=\"single\" required=\"true\" "
            f"showInline=\"true\">\n{choices}\n  </Choices>\n</View>\n")


@dataclass
class ConfigTags:
    """What a labelling config holds: the Image tag, and per control tag kind its name and labels."""

    image: str | None = None
    brush: dict[str, list[str]] = field(default_factory=dict)     # BrushLabels name -> label values
    polygon: dict[str, list[str]] = field(default_factory=dict)   # PolygonLabels name -> label values
    choices: dict[str, list[str]] = field(default_factory=dict)   # Choices name -> choice values


def read_config(xml: str) -> ConfigTags:
    """The tags of a Label Studio labelling config; a ValueError when it is not XML."""
    try:
        root = ElementTree.fromstring(xml or "")
    except ElementTree.ParseError as e:
        raise ValueError(f"label_config: expected a Label Studio labelling config (XML), got {e}") from None
    out = ConfigTags()
    for el in root.iter():
        tag = el.tag.lower()
        if tag == "image" and out.image is None:
            out.image = el.get("name")
        kind = {"brushlabels": out.brush, "polygonlabels": out.polygon, "choices": out.choices}.get(tag)
        if kind is not None:
            kind[el.get("name") or ""] = [c.get("value") or "" for c in el if c.tag.lower() in ("label", "choice")]
    return out
