"""The command line: the one place that knows every component and wires them together."""
