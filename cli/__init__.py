"""The `day0` command line (entry point `cli:run`): it starts flows, so it sits above them."""

from cli._plugins import install

install()  # before any pydantic model is built (day0's are, as their modules are imported): see cli._plugins


def run() -> int:
    """The `day0` command, as a process (the console script and `python -m cli`)."""
    import gc

    # What the imports build (modules, classes, validators) lives as long as the process: no collection
    # needs to scan it while it is built. main() freezes it, then collects again unless the command is brief.
    gc.disable()
    from cli.main import main

    return main()
