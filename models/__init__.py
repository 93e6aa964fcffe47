"""Reference models of the specification, checked against :mod:`askgate.core`."""
