"""incastlab: controller."""
