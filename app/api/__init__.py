"""HTTP layer: content negotiation, wire conversion, dependencies and routes."""
