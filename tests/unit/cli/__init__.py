"""The command line (`cli`): bad inputs, start-up, `day0 validate`'s preflight."""
