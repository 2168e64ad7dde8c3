"""Live links to the tools teams already label and look in (Label Studio, ...): each a subpackage over
the loop's project, talking to the tool's server through its official client."""
