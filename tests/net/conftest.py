"""Network tests run their bodies on both event loops: plain asyncio and uvloop."""
import asyncio

import pytest

try:
    import uvloop
except ImportError:  # (a test dependency: reported as skipped, never silently dropped)
    uvloop = None

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"),
         pytest.param(uvloop.new_event_loop if uvloop else None, id="uvloop",
                      marks=pytest.mark.skipif(uvloop is None, reason="uvloop not installed"))]


@pytest.fixture(params=LOOPS)
def loop_factory(request):
    return request.param
