"""The anyio shell: turns the core's effects into I/O and I/O into events. It decides nothing.

Every transport has one shape (:class:`askgate.transports.base.Transport`): a class in its own
module here, built from the server it serves (``StdioTransport(server)``,
``HttpTransport(server)``), that runs the server for the length of its ``running()`` block.
What the ASGI transports share is in :mod:`askgate.transports.asgi`.
"""
