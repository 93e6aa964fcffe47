"""The anyio shell: turns the core's effects into I/O and I/O into events. It decides nothing."""
