# The two commands of the README. Both set up first, so each works on a fresh machine.
.PHONY: serve test

serve:
	deploy/setup.sh
	.venv/bin/arengine serve

test:
	deploy/setup.sh --test
	.venv/bin/ruff check arengine tests loadtests models
	.venv/bin/mypy
	.venv/bin/pytest
