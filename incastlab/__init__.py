"""incastlab: incastlab."""
