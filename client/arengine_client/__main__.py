"""`python -m arengine_client`: the `arengine` command (`cli.main`)."""

from arengine_client.cli import main

if __name__ == "__main__":
    main()
