"""Mininet topologies (pure descriptions) and the link classes that give them queues."""
