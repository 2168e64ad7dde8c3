"""Live links to the tools teams already label and look in (Label Studio, FiftyOne): each a subpackage over
the loop's project (and the scan), talking to the tool through its official client, which is imported only
when called, so blindspots runs without them."""
