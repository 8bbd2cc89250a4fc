"""The `day0` command line (entry point `cli.main:main`): it starts flows, so it sits above them."""

from cli._plugins import install

install()  # before any pydantic model is built (day0's are, as their modules are imported): see cli._plugins
