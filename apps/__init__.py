"""incastlab: apps."""
