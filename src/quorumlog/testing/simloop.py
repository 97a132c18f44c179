"""An asyncio event loop on virtual time, for deterministic simulation of real asyncio code.

`VirtualTimeLoop` is a SelectorEventLoop whose selector does no I/O: when the loop would wait
for `timeout` seconds, the virtual clock jumps `timeout` ahead and the timers due run at
once. Everything the simulated code schedules (asyncio.sleep, call_later, wait_for, the
simulated network's deliveries) runs in the order of its virtual deadline, one callback at a
time, never reading the wall clock: a run is a function of its inputs (and its seed).

Nothing may do real I/O on it (no sockets: the selector would never report them ready) and
no thread may post to it (call_soon_threadsafe): the simulator passes a simulated network
and a simulated flusher to the code it runs. A loop with nothing scheduled has deadlocked:
SimulationDeadlock.
"""
from __future__ import annotations

import asyncio
import selectors

__all__ = ["VirtualTimeLoop", "SimulationDeadlock", "new_virtual_loop"]


class SimulationDeadlock(RuntimeError):
    """The loop was asked to wait forever: nothing is scheduled."""


class _VirtualSelector(selectors.BaseSelector):
    """Registers file objects (the loop's self-pipe) and never reports any ready; select()
    moves the virtual clock instead of waiting."""

    def __init__(self):
        self._map: dict = {}
        self.now = 0.0

    def register(self, fileobj, events, data=None):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fileobj] = key
        return key

    def unregister(self, fileobj):
        return self._map.pop(fileobj)

    def modify(self, fileobj, events, data=None):
        self._map.pop(fileobj, None)
        return self.register(fileobj, events, data)

    def select(self, timeout=None):
        if timeout is None:
            raise SimulationDeadlock("nothing is scheduled on the virtual-time loop")
        if timeout > 0:
            self.now += timeout
        return []

    def get_map(self):
        return self._map

    def close(self):
        self._map.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        self._vsel = _VirtualSelector()
        super().__init__(self._vsel)
        self.set_debug(False)

    def time(self) -> float:
        return self._vsel.now


def new_virtual_loop() -> VirtualTimeLoop:
    return VirtualTimeLoop()
