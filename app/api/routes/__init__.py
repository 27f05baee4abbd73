"""One router per resource: gradients, verify, operators, health."""
