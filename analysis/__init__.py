"""incastlab: analysis."""
