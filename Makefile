# The two commands of the README. Both set up first, so each works on a fresh machine.
.PHONY: serve test bench image

serve:
	deploy/setup.sh
	.venv/bin/arengine serve

test:
	deploy/setup.sh --test
	.venv/bin/ruff check arengine tests loadtests models
	.venv/bin/ruff format --check arengine tests loadtests models
	.venv/bin/mypy
	rm -rf .coverage-data && mkdir -p .coverage-data
	.venv/bin/coverage run -m pytest
	.venv/bin/coverage combine -q
	.venv/bin/coverage report

# Benchmarks (not tests): quick versions of every experiment; FULL=1 for the published lengths.
bench:
	deploy/setup.sh --test
	.venv/bin/pip install -q -e '.[bench]'
	loadtests/bench.sh

# The container image arengine:latest (base and torch source chosen by what is reachable).
image:
	deploy/image.sh
