"""Every CRC32C implementation the CPU runs (table, SSE4.2 crc32, VPCLMULQDQ folding on 256-
and 512-bit registers) agrees with the pure-Python reference (quorumlog.format.crc32c) on any
bytes, length, alignment and continued register -- the folding paths especially around their
256 / 64 / 16-byte rounds."""
import pytest
from hypothesis import given, strategies as st

from quorumlog import format as qf
from quorumlog.commitlog import crc32c, crc32c_path, crc32c_paths

from cl_support import hsettings

BLOB = bytes((i * 151 + 11) & 0xFF for i in range(12000))


def test_known_vector_on_every_path():
    for path in crc32c_paths():
        assert crc32c_path(path, b"123456789") == 0xE3069283, path
        assert crc32c_path(path, bytes(4096)) == qf.crc32c(bytes(4096)), path


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 271, 272, 319,
                               320, 511, 512, 513, 767, 1023, 1024, 4096, 4193, 11000])
def test_paths_agree_around_the_rounds(n):
    for off in (0, 1, 7, 13):
        want = qf.crc32c(BLOB[off:off + n])
        for path in crc32c_paths():
            assert crc32c_path(path, BLOB[off:off + n]) == want, (path, n, off)
        assert crc32c(BLOB[off:off + n]) == want


@given(st.binary(min_size=0, max_size=3000), st.integers(0, 2**32 - 1),
       st.integers(0, 40))
@hsettings(150)
def test_paths_agree_on_any_bytes_and_register(data, value, cut):
    """crc32c(b, crc32c(a)) == crc32c(a + b) on every path, from any starting value."""
    want = qf.crc32c(data, value)
    for path in crc32c_paths():
        assert crc32c_path(path, data, value) == want, path
        assert crc32c_path(path, data[cut:], crc32c_path(path, data[:cut], value)) == want


def test_the_paths_the_cpu_flags_promise_are_there():
    # a folding path the CPU supports but the build or the cpuid check lost would leave the
    # tests above comparing fewer paths, silently
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(l for l in f if l.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags")
    paths = crc32c_paths()
    assert ("sse42" in paths) == ("sse4_2" in flags)
    assert ("fold256" in paths) == ({"avx2", "vpclmulqdq", "pclmulqdq"} <= flags)
    assert ("fold" in paths) == ({"avx512f", "avx512vl", "vpclmulqdq", "pclmulqdq"} <= flags)


def test_unknown_path_is_refused():
    with pytest.raises(ValueError, match="not available"):
        crc32c_path("nope", b"x")

