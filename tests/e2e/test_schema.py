"""Property-based testing of the OpenAPI schema with schemathesis: no 5xx, responses match it."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.conftest import Server, ServerFactory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--max-upload-bytes", "2000000")


def test_the_api_honours_its_schema(server: Server) -> None:
    api = schemathesis.openapi.from_url(server.url + "/openapi.json")
    tested = []
    for result in api.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # an Err would raise here

        @given(case=operation.as_strategy())
        @settings(
            max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def check(case: schemathesis.Case[Any]) -> None:
            # A schema cannot say "valid audio": random bytes are schema-valid and rightly refused.
            case.call_and_validate(excluded_checks=[positive_data_acceptance])

        check()
        tested.append(operation.label)
    assert "POST /v1/recognize" in tested
