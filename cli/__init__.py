"""The `day0` command line (entry point `cli.main:main`): it starts flows, so it sits above them."""
