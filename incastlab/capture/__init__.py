"""What a run measures while it runs: switch queues, packet captures, TCP counters."""
