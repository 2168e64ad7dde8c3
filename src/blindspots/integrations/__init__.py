"""Bridges to the tools people already use around blindspots (FiftyOne). Each tool's package
imports the tool itself only when called, so blindspots runs without them."""
