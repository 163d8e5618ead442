# The two commands of the README. Both set up first, so each works on a fresh machine.
.PHONY: serve test test-fast bench image docs

serve:
	deploy/setup.sh
	.venv/bin/arengine serve

test:
	deploy/setup.sh --test
	.venv/bin/ruff check conftest.py arengine client tests loadtests models docs
	.venv/bin/ruff format --check conftest.py arengine client tests loadtests models docs
	.venv/bin/mkdocs build --strict --quiet
	rm -rf .coverage-data && mkdir -p .coverage-data
	# pytest-xdist with one worker more than the cores (a test module per worker; tests/conftest.py's
	# scheduler), and mypy beside it: the tests wait on servers, streams and timeouts about a
	# fifth of the time, which the extra worker and mypy's 20 s of one core fill. In turn in one
	# clone on 2 quiet AMD EPYC cores, mypy and pytest took 601 s this way against 633 s with mypy
	# first and 2 workers. mypy's report is printed after pytest's, and either failing fails the
	# target. Coverage measures the workers and the servers the tests start (pyproject's
	# [tool.coverage.run] patch), and combine joins their data. The 30 slowest tests are listed at
	# the end, so every CI log says where the suite's time goes.
	typed=$$(mktemp); .venv/bin/mypy > $$typed 2>&1 & mypy=$$!; \
	.venv/bin/coverage run -m pytest -n $$(( $$(nproc) + 1 )) --durations=30; tests=$$?; \
	wait $$mypy; types=$$?; cat $$typed; rm -f $$typed; \
	test $$tests -eq 0 && test $$types -eq 0
	.venv/bin/coverage combine -q
	.venv/bin/coverage report

# The inner loop (the target is 3 minutes on 2 cores): the same checks and every test but the
# container suite and the tests marked `slow` (see pyproject's markers), without coverage, on one
# worker more than the cores: the tests wait on timeouts and servers a fifth of the time, which
# the extra worker fills (2 quiet AMD EPYC cores, in turn: 2:52 and 2:56 against 3:04 on 2).
# Sets up only when the venv is missing; `make test` stays the full CI run.
test-fast:
	test -x .venv/bin/pytest || deploy/setup.sh --test
	.venv/bin/ruff check conftest.py arengine client tests loadtests models docs
	.venv/bin/ruff format --check conftest.py arengine client tests loadtests models docs
	.venv/bin/mypy
	.venv/bin/pytest -q -n $$(( $$(nproc) + 1 )) -m "not slow and not container"

# Benchmarks (not tests): quick versions of every experiment; FULL=1 for BENCHMARKS.md's lengths.
bench:
	deploy/setup.sh --test
	.venv/bin/pip install -q -e '.[bench]'
	loadtests/bench.sh

# The container image arengine:latest (base and torch source chosen by what is reachable).
image:
	deploy/image.sh

# The documentation site (docs/, mkdocs.yml) on http://127.0.0.1:8001, rebuilt as pages change;
# `make test` builds it with --strict. The reference pages are generated from the code.
docs:
	test -x .venv/bin/mkdocs || deploy/setup.sh --test
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve --dev-addr 127.0.0.1:8001
